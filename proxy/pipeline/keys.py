"""Content keys: the names the caches file a text, a message and a conversation's prefix under.

Counts, compactions, facts and replays are cached by content in a process that serves many
clients, so a key must name its content and nothing else, or one request is served another's
counts or compactions. A key is therefore a cryptographic digest of the content, never Python's
hash() alone: that is 64 bits, collides by construction (hash(-1) == hash(-2), hash(1) ==
hash(1.0) == hash(True) == hash(2**61), whose JSON and token counts differ) and, with
PYTHONHASHSEED fixed, can be made to collide by anyone who wants to. SHA-256 is the fastest of
hashlib's digests on CPUs with SHA extensions (~1.7 GB/s here, blake2b ~0.8, sha1 about the
same and broken; bench/tokens_cache.py); it is truncated to 128 bits, where a collision still
takes ~2^64 work. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

SIZE = 16
# Characters encoded at a time: a long text is never copied whole to be digested.
PIECE = 1 << 18


def digest(kind: bytes, data: bytes = b"") -> bytes:
    """The key of `data` in the namespace `kind` (which holds no NUL byte)."""
    h = hashlib.sha256(kind + b"\0")
    h.update(data)
    return h.digest()[:SIZE]


def text_key(text: str, kind: bytes = b"t") -> bytes:
    """The key of a text, in a namespace `kind` (b"t" for texts, b"tools" for tool lists)."""
    h = hashlib.sha256(kind + b"\0")
    for i in range(0, len(text), PIECE):
        # surrogatepass: a lone surrogate (valid in a str, not in UTF-8) is keyed, not refused.
        h.update(text[i : i + PIECE].encode("utf-8", "surrogatepass"))
    return h.digest()[:SIZE]


def chain(previous: bytes, key: bytes) -> bytes:
    """The key of a sequence from the key of its prefix and that of its next element."""
    return hashlib.sha256(previous + key).digest()[:SIZE]


def prefixes(items: Sequence[Any], key_of: Callable[[Any], bytes | None]) -> list[bytes] | None:
    """chain[n]: the key of items[:n], from their keys; None when an item has none. One chain
    per request names every prefix of the conversation for all the memos that need one."""
    h = digest(b"prefix")
    chain = [h]
    for item in items:
        k = key_of(item)
        if k is None:
            return None
        h = hashlib.sha256(h + k).digest()[:SIZE]
        chain.append(h)
    return chain
