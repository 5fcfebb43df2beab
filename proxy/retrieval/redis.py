"""The retrieval store shared through Redis: a hash issued by one replica is served by any.

Two tiers. Every put goes to this process's `MemoryStore` first (so this replica serves its
own refs whatever Redis does) and then to Redis, one pipelined round trip of `SET key text PX
ttl` (a put of a ref already held refreshes its TTL: "refreshed whenever a request names it
again"; so does `holds`, for a ref the edge finds held). A get reads the local tier first and
asks Redis only on a local miss, keeping what it finds. Redis down or slow costs at most one
`timeout` (proxy.redis_link), after which the store is the embedded one until Redis answers again.

Values are bounded: a text larger than `max_chars` stays in this process only; Redis's own
memory is bounded by the TTL and, in the compose profile, by `maxmemory` with LRU eviction.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from proxy.redis_link import PREFIX, RedisLink, Unavailable
from proxy.retrieval.store import Gone, MemoryStore

if TYPE_CHECKING:
    from proxy.redis_link import Client

KEY = PREFIX + "ref:"
RENEWED = 8192  # refs whose last TTL renewal in Redis is remembered


class RedisStore:
    """A `proxy.retrieval.store.Store`: the embedded store in front of Redis."""

    def __init__(
        self,
        link: RedisLink,
        local: MemoryStore,
        *,
        ttl: float,
        max_chars: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.link = link
        self.local = local
        self.ttl = ttl
        self.ttl_ms = max(1, int(ttl * 1000))
        self.max_chars = max_chars
        self.clock = clock
        self.shared_hits = self.shared_misses = 0
        self._renewed: OrderedDict[str, float] = OrderedDict()  # ref -> last TTL sent to Redis

    def holds(self, ref: str) -> bool:
        """Held here (and refreshed here). The edge then skips the put, so the key's TTL in
        Redis is renewed behind it, at most once a quarter of the TTL per ref (a long
        conversation names its refs on every turn); a key Redis lost (a restart, eviction) is
        written again from this process's copy."""
        if not self.local.holds(ref):
            return False
        now = self.clock()
        if now - self._renewed.get(ref, now - self.ttl) >= self.ttl / 4:
            self._renewed_at(ref, now)
            self.link.spawn(lambda redis: self._renew(redis, ref))
        return True

    async def put(self, items: Mapping[str, str]) -> None:
        self.local.put_sync(items)
        shared = {ref: text for ref, text in items.items() if len(text) <= self.max_chars}
        if not shared:
            return
        now = self.clock()
        for ref in shared:
            self._renewed_at(ref, now)

        async def write(redis: Client) -> None:
            async with redis.pipeline(transaction=False) as pipe:
                for ref, text in shared.items():
                    pipe.set(KEY + ref, text, px=self.ttl_ms)
                await pipe.execute()

        try:
            await self.link.call(write)
        except Unavailable:
            pass  # kept in this process; other replicas answer Gone for it meanwhile

    async def get(self, ref: str) -> str:
        try:
            return self.local.get_sync(ref)
        except Gone as here:
            missing = here
        try:
            text = await self.link.call(lambda redis: redis.get(KEY + ref))
        except Unavailable:
            raise Gone(f"{missing} (the shared store is unreachable just now)") from None
        if not isinstance(text, str):
            self.shared_misses += 1
            raise Gone(
                f"hash={ref} is not held by any replica (kept in Redis for "
                f"{self.ttl:g} s after a request last named it)"
            )
        self.shared_hits += 1
        self.local.put_sync({ref: text})
        return text

    def info(self) -> dict[str, int]:
        return {
            **self.local.info(),
            "shared_hits": self.shared_hits,
            "shared_misses": self.shared_misses,
        }

    async def _renew(self, redis: Client, ref: str) -> None:
        if await redis.pexpire(KEY + ref, self.ttl_ms):
            return
        text = self.local.peek(ref)
        if text is not None and len(text) <= self.max_chars:
            await redis.set(KEY + ref, text, px=self.ttl_ms)

    def _renewed_at(self, ref: str, now: float) -> None:
        self._renewed[ref] = now
        self._renewed.move_to_end(ref)
        while len(self._renewed) > RENEWED:
            self._renewed.popitem(last=False)
