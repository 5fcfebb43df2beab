"""Where the originals behind the refs live: a bounded in-process store by default, behind an
async interface a shared store (Redis, proxy.retrieval.redis) implements too.

A ref names its content (a hash of it), so a put is idempotent and any replica holding the text
serves it alike. The embedded store is bounded three ways (entries, bytes, age), oldest out
first. Its bytes are the texts' size in memory (a character takes 1 to 4), so text from a tool
nobody controls cannot hold four times the bound. It remembers a bounded list of the refs it
let go of, so an expired ref gets a clear answer rather than "unknown". Used from the event
loop only: no lock.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Protocol

FORGOTTEN = 4096  # refs let go of, remembered to say why


class Gone(LookupError):
    """The ref is not (or no longer) held; the message says which and why."""


class Store(Protocol):
    async def put(self, items: Mapping[str, str]) -> None:
        """Keep each text under its ref (a ref already held is only refreshed)."""
        ...

    async def get(self, ref: str) -> str:
        """The text of `ref`; raises Gone."""
        ...

    def holds(self, ref: str) -> bool:
        """Whether the store surely holds `ref` for a while yet, without I/O (a ref it holds is
        refreshed, as a put would): the edge puts only the refs it does not."""
        ...

    def info(self) -> dict[str, int]:
        """Figures for /metrics: entries, bytes, hits, misses, evicted."""
        ...


class MemoryStore:
    def __init__(
        self,
        max_items: int = 4096,
        max_bytes: int = 64_000_000,
        ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_items = max(1, max_items)
        self.max_bytes = max(1, max_bytes)
        self.ttl = ttl
        self.clock = clock
        self._texts: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._gone: OrderedDict[str, str] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = self.evicted = 0

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, ref: str) -> bool:
        return ref in self._texts

    def holds(self, ref: str) -> bool:
        hit = self._texts.pop(ref, None)
        if hit is None:
            return False
        self._texts[ref] = (hit[0], self.clock())
        return True

    def peek(self, ref: str) -> str | None:
        """The text if held, counting and refreshing nothing (proxy.retrieval.redis writes it
        to Redis again when Redis lost it)."""
        hit = self._texts.get(ref)
        return None if hit is None else hit[0]

    def put_sync(self, items: Mapping[str, str]) -> None:
        now = self.clock()
        self._expire(now)
        for ref, text in items.items():
            old = self._texts.pop(ref, None)
            if old is not None:
                self.bytes -= sys.getsizeof(old[0])
            size = sys.getsizeof(text)
            if size > self.max_bytes:
                continue  # larger than the whole store: not kept (read as gone)
            self._texts[ref] = (text, now)
            self.bytes += size
            self._gone.pop(ref, None)
        while len(self._texts) > self.max_items or self.bytes > self.max_bytes:
            self._drop(
                next(iter(self._texts)),
                f"evicted to make room (kept: {self.max_items:,} texts, {self.max_bytes:,} bytes)",
            )

    def get_sync(self, ref: str) -> str:
        self._expire(self.clock())
        hit = self._texts.get(ref)
        if hit is not None:
            self.hits += 1
            return hit[0]
        self.misses += 1
        why = self._gone.get(ref)
        if why is not None:
            raise Gone(f"hash={ref} is no longer kept: {why}")
        raise Gone(
            f"hash={ref} is not held by this proxy (the originals are kept in memory, or in "
            "the store SHRINK_STORE_URL names, and a restart of an in-memory store forgets them)"
        )

    async def put(self, items: Mapping[str, str]) -> None:
        self.put_sync(items)

    async def get(self, ref: str) -> str:
        return self.get_sync(ref)

    def info(self) -> dict[str, int]:
        return {
            "entries": len(self._texts),
            "bytes": self.bytes,
            "hits": self.hits,
            "misses": self.misses,
            "evicted": self.evicted,
        }

    def _expire(self, now: float) -> None:
        limit = now - self.ttl
        while self._texts:
            ref, (_, created) = next(iter(self._texts.items()))
            if created >= limit:
                break
            self._drop(ref, f"expired (texts are kept for {self.ttl:g} s)")

    def _drop(self, ref: str, why: str) -> None:
        text, _ = self._texts.pop(ref)
        self.bytes -= sys.getsizeof(text)
        self.evicted += 1
        self._gone[ref] = why
        while len(self._gone) > FORGOTTEN:
            self._gone.popitem(last=False)
