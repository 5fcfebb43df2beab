"""Where finished summary texts live, by content hash (`proxy.pipeline.summary.span_key`).

One process: a bounded LRU (`LRUSummaryCache`). Several replicas (`SHRINK_STORE_URL`): the same
LRU in front of Redis (`SharedSummaryCache`), so a summary one replica paid a model call for is
inserted, byte for byte, by every other replica (and the backend's prefix cache survives a
conversation moving between replicas). The local tier keeps what one process does exactly as
without Redis: `get`/`put` stay synchronous and local; only a local miss is read through from
Redis (`fetch`, bounded by the store's timeout), and a new summary is written behind, in the
background.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from proxy.redis_link import PREFIX, RedisLink, Unavailable

if TYPE_CHECKING:
    from proxy.redis_link import Client

KEY = PREFIX + "summary:"


class SummaryCache(Protocol):
    def get(self, key: str) -> str | None:
        """The text held in this process, without waiting for anything."""
        ...

    def put(self, key: str, value: str) -> None: ...

    async def fetch(self, key: str) -> str | None:
        """On a miss of `get`: the text from a shared tier, or None (never raises)."""
        ...

    def info(self) -> tuple[int, int, int]:
        """(hits, misses, entries), for the metrics' cache table."""
        ...


class LRUSummaryCache:
    """A bounded in-process LRU (by count and by characters). Used from the event loop only, so
    it needs no lock."""

    def __init__(self, capacity: int = 1024, max_chars: int = 8_000_000):
        self.capacity = max(1, capacity)
        self.max_chars = max(1, max_chars)
        self.chars = 0
        self.hits = self.misses = 0
        self._data: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def put(self, key: str, value: str) -> None:
        old = self._data.pop(key, None)
        if old is not None:
            self.chars -= len(old)
        self._data[key] = value
        self.chars += len(value)
        while len(self._data) > 1 and (
            len(self._data) > self.capacity or self.chars > self.max_chars
        ):
            self.chars -= len(self._data.popitem(last=False)[1])

    async def fetch(self, key: str) -> str | None:
        return None  # nothing behind this process

    def info(self) -> tuple[int, int, int]:
        """(hits, misses, entries), for the metrics' cache table."""
        return self.hits, self.misses, len(self._data)

    def __len__(self) -> int:
        return len(self._data)


class SharedSummaryCache:
    """The LRU in front of Redis: read-through on a local miss, write-behind on a put."""

    def __init__(
        self, link: RedisLink, local: LRUSummaryCache, *, ttl: float, max_chars: int
    ) -> None:
        self.link = link
        self.local = local
        self.ttl_ms = max(1, int(ttl * 1000))
        self.max_chars = max_chars
        self.shared_hits = 0

    def get(self, key: str) -> str | None:
        return self.local.get(key)

    def put(self, key: str, value: str) -> None:
        self.local.put(key, value)
        if len(value) <= self.max_chars:
            self.link.spawn(lambda redis: redis.set(KEY + key, value, px=self.ttl_ms))

    async def fetch(self, key: str) -> str | None:
        def read(redis: Client):  # GETEX: a summary in use stays (its TTL starts again)
            return redis.getex(KEY + key, px=self.ttl_ms)

        try:
            value = await self.link.call(read)
        except Unavailable:
            return None
        if not isinstance(value, str):
            return None
        self.shared_hits += 1
        self.local.put(key, value)
        return value

    def info(self) -> tuple[int, int, int]:
        """A local miss that Redis answered counts as a hit."""
        hits, misses, entries = self.local.info()
        return hits + self.shared_hits, misses - self.shared_hits, entries

    def __len__(self) -> int:
        return len(self.local)
