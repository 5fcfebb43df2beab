"""Cut moves: where stage 2's cut sits in each conversation, and when it moves between turns.

A backend's prefix cache survives a turn only if the prompt's beginning is the same bytes as the
turn before; stage 2 drops old history at a sticky cut, and every time that cut moves the cache is
rebuilt from the cut onwards. Counting moves shows how often shrinking costs a cache rebuild.

A conversation is known by a digest of its root (the messages up to and including the first user
message, which every later turn repeats); the cut is where the kept history resumes (0: nothing
dropped). Only digests and integers are kept, in a bounded LRU: no content.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import orjson

from proxy.pipeline import Report

# Roots longer than this are digested by their first and last bytes and their length: the root
# is hashed on the request path, and the first user message can be a whole pasted file.
ROOT_BYTES = 64 * 1024


def conversation_root(messages: object) -> bytes | None:
    """A digest of the messages up to the first user message; None when there is none."""
    if not isinstance(messages, list):
        return None
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            try:
                raw = orjson.dumps(messages[: i + 1], option=orjson.OPT_SORT_KEYS)
            except (orjson.JSONEncodeError, TypeError):
                return None
            if len(raw) > ROOT_BYTES:
                raw = raw[: ROOT_BYTES // 2] + raw[-ROOT_BYTES // 2 :] + str(len(raw)).encode()
            return hashlib.blake2b(raw, digest_size=16).digest()
    return None


def cut_of(report: Report) -> int:
    """Where the kept history resumes in the client's messages (0 when stage 2 dropped none)."""
    return max((d.index for d in report.details if d.stage == "trim"), default=0)


def cut_point(messages: Any, report: Report) -> tuple[bytes, int] | None:
    """(conversation root, cut) of one planned request, for `CutTracker.moved`."""
    root = conversation_root(messages)
    return (root, cut_of(report)) if root is not None else None


class CutTracker:
    """The last cut seen per conversation root (bounded LRU); thread-safe."""

    def __init__(self, max_conversations: int = 4096) -> None:
        self.max_conversations = max_conversations
        self._cuts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def moved(self, root: bytes, cut: int) -> bool:
        """Record this request's cut; True when it differs from the previous one of its root."""
        with self._lock:
            previous = self._cuts.pop(root, None)
            self._cuts[root] = cut
            while len(self._cuts) > self.max_conversations:
                self._cuts.popitem(last=False)
        return previous is not None and previous != cut

    def __len__(self) -> int:
        return len(self._cuts)
