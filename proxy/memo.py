"""The memo of compactions and facts one process keeps across requests: bounded, thread-safe."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class CompactMemo(OrderedDict[Hashable, Any]):
    """A bounded, thread-safe LRU for stage-1 results, the facts read of dropped spans and the
    facts text under a marker (agents resend the same tool output and the same dropped span
    every turn).

    Bounded by entries and by the characters its values hold: a compacted tool result can be
    anywhere from nothing to tens of KB, so a count alone let the memo of a long-running
    process grow to ~16 MB (bench/overhead: RSS at the end of a full run, 4,096 entries).
    """

    # What an entry costs besides its text: key tuple, OrderedDict node, the value object.
    ENTRY_OVERHEAD = 200

    def __init__(self, capacity: int, max_chars: int = 4_000_000):
        super().__init__()
        self.capacity = capacity
        self.max_chars = max_chars
        self.chars = 0
        self._sizes: dict[Hashable, int] = {}
        self.lock = threading.Lock()

    @classmethod
    def size_of(cls, value: Any) -> int:
        chars = getattr(value, "memo_chars", None)  # what a span's facts hold (pipeline.notes)
        if isinstance(chars, int):
            return cls.ENTRY_OVERHEAD + chars
        text = value if isinstance(value, str) else getattr(value, "text", None)
        if isinstance(text, str):
            return cls.ENTRY_OVERHEAD + len(text)
        if isinstance(value, list):
            return cls.ENTRY_OVERHEAD + sum(len(v) + 60 for v in value if isinstance(v, str))
        return cls.ENTRY_OVERHEAD

    def __getitem__(self, key: Hashable) -> Any:
        with self.lock:
            value = super().__getitem__(key)
            self.move_to_end(key)
            return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        size = self.size_of(value)
        with self.lock:
            self.chars += size - self._sizes.get(key, 0)
            self._sizes[key] = size
            super().__setitem__(key, value)
            self.move_to_end(key)
            while len(self) > 1 and (len(self) > self.capacity or self.chars > self.max_chars):
                old, _ = self.popitem(last=False)
                self.chars -= self._sizes.pop(old)
