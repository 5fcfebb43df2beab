"""Retrieval refs: the content hash each elision is filed under, and the words that carry it.

Every stage-1 compaction and every dropped history span keeps its original text in a store
(proxy.retrieval) under a hash of that text; the marker tells the model the hash in the form
other tools already parse (`Retrieve more: hash=<24 hex>`). A ref is a pure function of the
content it names, so markers stay byte-stable from turn to turn (prefix caches survive) and any
replica that holds the content serves the same ref. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

HEX = 24  # 96 bits: a collision takes ~2^48 work, far past a store's lifetime of texts
REF_RE = re.compile(r"hash=([0-9a-f]{24})\b")


def text_ref(text: str) -> str:
    """The ref of a text (a tool result as the client sent it)."""
    h = hashlib.sha256(b"ref-text\0")
    for i in range(0, len(text), 1 << 18):
        h.update(text[i : i + (1 << 18)].encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:HEX]


def span_ref(chain: Sequence[bytes], start: int, end: int) -> str:
    """The ref of messages[start:end] as sent, from keys.prefixes of the messages as sent:
    chain[n] names messages[:n], so the pair names the span and what precedes it (a span
    repeated in another conversation is another span)."""
    return hashlib.sha256(b"ref-span\0" + chain[start] + chain[end]).hexdigest()[:HEX]


def footer(ref: str, lines: int) -> str:
    """The last line of a compacted tool result: where the whole of it is."""
    noun = "line" if lines == 1 else "lines"
    return f"[... {lines:,} {noun} in all, kept by shrink-proxy. Retrieve more: hash={ref} ...]"


def in_json(text: str, ref: str) -> str | None:
    """A compacted JSON text with the ref inside its last omission note (a JSON string, which
    plain ASCII without quotes or backslashes keeps valid), so it still parses; None when it
    holds no note."""
    at = text.rfind(_JSON_NOTE)
    if at < 0:
        return None
    end = at + len(_JSON_NOTE) - len(" ...")
    return f"{text[:end]}{json_note(ref)}{text[end:]}"


def json_note(ref: str) -> str:
    return f"; Retrieve more: hash={ref}"


_JSON_NOTE = " omitted by shrink-proxy ..."


def span_note(ref: str) -> str:
    """Appended to the trim marker: where the dropped messages are."""
    return f" Retrieve more: hash={ref}"


def refs_in(text: str) -> list[str]:
    """Every ref a text names, in order, each once."""
    return list(dict.fromkeys(REF_RE.findall(text)))
