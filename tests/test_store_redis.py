"""The shared store against a real redis-server: the retrieval store, the summary cache, learnt
windows and calibration, and what each does when Redis is down or hung.

Two `RedisStore`s (or caches) on one server stand for two replicas; tests/test_replicas.py runs
two real proxy processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from proxy.discovery import WindowDiscovery
from proxy.overflow import Calibration
from proxy.redis_link import MAX_PENDING, PREFIX, RedisLink
from proxy.retrieval.redis import RedisStore
from proxy.retrieval.store import Gone, MemoryStore
from proxy.shared_learning import CALIBRATION, MAX_FIELDS, WINDOWS, SharedLearning
from proxy.summary_cache import LRUSummaryCache, SharedSummaryCache
from tests.redis_server import RedisServer, redis_server, silent_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as s:
        yield s


@pytest.fixture
def redis(server: RedisServer) -> RedisServer:
    server.command(b"FLUSHALL")
    return server


def run(fn: Callable[..., Awaitable[Any]], url: str, n: int = 1, **link: float) -> Any:
    """`fn(*links)` with `n` RedisLinks to `url` (n replicas), closed after."""

    async def main() -> Any:
        links = [
            RedisLink.from_url(url, timeout=link.get("timeout", 0.5), retry=link.get("retry", 0.1))
            for _ in range(n)
        ]
        try:
            return await fn(*links)
        finally:
            for one in links:
                await one.aclose()

    return asyncio.run(main())


def store(link: RedisLink, ttl: float = 60.0, max_chars: int = 1000) -> RedisStore:
    return RedisStore(link, MemoryStore(), ttl=ttl, max_chars=max_chars)


def test_a_ref_put_by_one_replica_is_served_by_another(redis):
    async def main(a: RedisLink, b: RedisLink) -> tuple[str, dict[str, int]]:
        one, two = store(a), store(b)
        await one.put({"abc123": "the original text"})
        text = await two.get("abc123")
        await two.get("abc123")  # now held locally: no second trip
        return text, two.info()

    text, info = run(main, redis.url, 2)
    assert text == "the original text"
    assert info["shared_hits"] == 1 and info["hits"] == 1 and info["entries"] == 1


def test_refs_carry_the_version_prefix_and_the_ttl(redis):
    async def main(a: RedisLink) -> None:
        await store(a, ttl=30.0).put({"r1": "x", "r2": "y"})

    run(main, redis.url)
    keys = redis.command(b"KEYS", b"*")
    assert f"{PREFIX}ref:r1".encode() in keys and f"{PREFIX}ref:r2".encode() in keys
    ttl = int(redis.command(b"PTTL", f"{PREFIX}ref:r1".encode())[1:].strip())
    assert 29_000 < ttl <= 30_000


def test_a_put_again_refreshes_the_ttl_and_an_expired_ref_is_gone_everywhere(redis):
    async def main(a: RedisLink, b: RedisLink) -> str:
        one = store(a, ttl=0.3)
        await one.put({"r": "text"})
        await asyncio.sleep(0.2)
        await one.put({"r": "text"})  # named again: 0.3 s from now
        await asyncio.sleep(0.2)
        assert await store(b, ttl=0.3).get("r") == "text"
        await asyncio.sleep(0.4)
        with pytest.raises(Gone) as gone:
            await store(b, ttl=0.3).get("r")
        return str(gone.value)

    assert "not held by any replica" in run(main, redis.url, 2)


def test_a_text_over_the_value_bound_stays_in_its_process(redis):
    async def main(a: RedisLink, b: RedisLink) -> str:
        one = store(a, max_chars=10)
        await one.put({"big": "x" * 11, "small": "y" * 10})
        assert await one.get("big") == "x" * 11  # still served here
        assert await store(b).get("small") == "y" * 10
        with pytest.raises(Gone):
            await store(b).get("big")
        return "ok"

    run(main, redis.url, 2)
    assert redis.command(b"EXISTS", f"{PREFIX}ref:big".encode()) == b":0\r\n"


def test_redis_down_degrades_to_the_embedded_store_and_recovers(redis, caplog):
    """Killed: the put is kept locally, a local miss is Gone at once, one log line per outage;
    back: the store writes to Redis again."""

    async def main(a: RedisLink) -> dict[str, Any]:
        one = store(a)
        await one.put({"before": "1"})
        redis.kill()
        began = time.monotonic()
        await one.put({"during": "2"})  # fails: marks Redis down
        await one.put({"during2": "3"})  # not tried
        with pytest.raises(Gone):
            await one.get("unknown")
        elapsed = time.monotonic() - began
        assert await one.get("during") == "2"
        down = a.info()
        redis.start()
        for _ in range(100):  # retry is 0.1 s
            if a.up:
                break
            await asyncio.sleep(0.05)
        await one.put({"after": "4"})
        return {"elapsed": elapsed, "down": down, "up": a.info()}

    with caplog.at_level(logging.WARNING, logger="proxy.redis_link"):
        out = run(main, redis.url)
    assert out["elapsed"] < 0.5 + 0.3  # one timeout at most, not one per call
    assert out["down"]["up"] is False and out["down"]["outages"] == 1
    assert out["down"]["fallbacks"]["error"] + out["down"]["fallbacks"]["timeout"] == 1
    assert out["down"]["fallbacks"]["down"] == 2
    assert out["up"]["up"] is True
    assert redis.command(b"GET", f"{PREFIX}ref:after".encode()) == b"$1\r\n4\r\n"
    unavailable = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(unavailable) == 1
    assert any("is back" in r.getMessage() for r in caplog.records)


def test_a_hung_redis_costs_one_timeout_then_nothing():
    """A server that accepts and never answers: the first call waits `timeout`, the next ones
    do not wait at all (known down); the summary cache's fetch and write-behind alike."""
    with silent_server() as hung:

        async def main(a: RedisLink) -> list[float]:
            one = store(a)
            cache = SharedSummaryCache(a, LRUSummaryCache(), ttl=60, max_chars=1000)
            times = []
            for _ in range(3):
                began = time.monotonic()
                with pytest.raises(Gone):
                    await one.get("r")
                assert await cache.fetch("k") is None
                cache.put("k2", "v")
                times.append(time.monotonic() - began)
            return times

        times = run(main, hung.url, timeout=0.2, retry=30)
    assert 0.15 < times[0] < 0.6, times
    assert max(times[1:]) < 0.05, times


def test_a_summary_made_by_one_replica_is_a_hit_on_another(redis):
    async def main(a: RedisLink, b: RedisLink) -> tuple[str | None, tuple[int, int, int], int]:
        one = SharedSummaryCache(a, LRUSummaryCache(), ttl=60, max_chars=1000)
        two = SharedSummaryCache(b, LRUSummaryCache(), ttl=60, max_chars=1000)
        one.put("span-key", "a summary")
        assert two.get("span-key") is None
        for _ in range(50):  # written behind
            if a.info()["pending"] == 0:
                break
            await asyncio.sleep(0.01)
        found = await two.fetch("span-key")
        assert two.get("span-key") == "a summary"  # kept locally from then on
        assert two.get("missing") is None and await two.fetch("missing") is None
        return found, two.info(), len(two)

    found, info, size = run(main, redis.url, 2)
    assert found == "a summary"
    # A local miss that Redis answered counts as a hit: 1 local hit + 1 shared; 1 true miss.
    hits, misses, entries = info
    assert (hits, misses, entries, size) == (2, 1, 1, 1)
    ttl = int(redis.command(b"PTTL", f"{PREFIX}summary:span-key".encode())[1:].strip())
    assert 59_000 < ttl <= 60_000


def test_write_behind_is_bounded():
    with silent_server() as hung:

        async def main(a: RedisLink) -> dict[str, Any]:
            cache = SharedSummaryCache(a, LRUSummaryCache(), ttl=60, max_chars=1000)
            for i in range(MAX_PENDING + 10):
                cache.put(f"k{i}", "v")
            return a.info()

        info = run(main, hung.url, timeout=5, retry=30)
    assert info["pending"] == MAX_PENDING and info["fallbacks"]["backlog"] == 10


def discovery() -> WindowDiscovery:
    return WindowDiscovery(None, "http://127.0.0.1:9/v1", ttl=300)  # type: ignore[arg-type]


def test_windows_and_calibration_learnt_by_one_replica_reach_another(redis):
    async def main(a: RedisLink, b: RedisLink) -> tuple[dict, dict, dict, dict]:
        cal_a, cal_b, win_a, win_b = Calibration(), Calibration(), discovery(), discovery()
        SharedLearning(a, cal_a, win_a, interval=60)
        learner_b = SharedLearning(b, cal_b, win_b, interval=60)
        win_a.remember("m", 5000)
        for _ in range(4):
            cal_a.record("m", 1000, 1200)
        await asyncio.sleep(0.1)  # written behind
        before = (win_b.snapshot(), cal_b.snapshot())
        await learner_b.refresh()
        return *before, win_b.snapshot(), cal_b.snapshot()

    win_before, cal_before, win_after, cal_after = run(main, redis.url, 2)
    assert win_before == {} and cal_before == {}
    assert win_after == {"m": 5000}
    assert cal_after == {"m": 1.25}  # 1.2 rounded up to a sixteenth
    # Coalesced, in order: the last of four samples recorded at once is what Redis holds.
    assert b",4," in redis.command(b"HGET", CALIBRATION.encode(), b"m")
    assert 0 < int(redis.command(b"TTL", WINDOWS.encode())[1:].strip()) <= 300


def test_calibration_adopts_only_the_better_informed():
    cal = Calibration()
    for _ in range(5):
        cal.record("m", 1000, 1100)
    cal.adopt("m", (1.5, 3, 1.5))  # fewer samples than ours: kept ours
    assert cal.ratio("m") == 1.125
    cal.adopt("m", (1.5, 9, 1.5))
    assert cal.ratio("m") == 1.5
    cal.adopt("x", (9.0, 50, 9.0))  # outside the bounds: junk
    assert cal.ratio("x") is None


def test_the_shared_hashes_stay_bounded(redis):
    async def main(a: RedisLink) -> None:
        learner = SharedLearning(a, Calibration(), discovery(), interval=60)
        for i in range(MAX_FIELDS + 20):
            learner.publish_calibration(f"model-{i}", (1.0, i + 3, 1.0))
            if i % 100 == 99:
                await asyncio.sleep(0.2)  # within MAX_PENDING writes at once
        learner.publish_window("old", 4096, 0.001)
        learner.publish_calibration("x" * 500, (1.0, 3, 1.0))  # too long a name: not sent
        await asyncio.sleep(0.3)
        await learner.refresh()  # trims
        await asyncio.sleep(0.1)

    run(main, redis.url)
    assert redis.command(b"HLEN", CALIBRATION.encode()) == f":{MAX_FIELDS}\r\n".encode()
    assert redis.command(b"HEXISTS", CALIBRATION.encode(), b"model-0") == b":0\r\n"
    assert redis.command(b"HEXISTS", WINDOWS.encode(), b"old") == b":0\r\n"


def test_a_held_ref_renews_its_key_and_rewrites_it_when_redis_lost_it(redis):
    async def main(a: RedisLink) -> tuple[bool, bool]:
        now = [0.0]
        one = RedisStore(a, MemoryStore(), ttl=40.0, max_chars=1000, clock=lambda: now[0])
        await one.put({"r": "text"})
        redis.command(b"PEXPIRE", f"{PREFIX}ref:r".encode(), b"5000")
        assert one.holds("r")  # just put: not renewed yet
        await asyncio.sleep(0.05)
        short = int(redis.command(b"PTTL", f"{PREFIX}ref:r".encode())[1:].strip()) <= 5000
        now[0] = 11.0  # past a quarter of the TTL
        assert one.holds("r")
        await asyncio.sleep(0.05)
        renewed = int(redis.command(b"PTTL", f"{PREFIX}ref:r".encode())[1:].strip()) > 39_000
        redis.command(b"FLUSHALL")  # Redis restarted empty, say
        now[0] = 22.0
        assert one.holds("r") and not one.holds("other")
        await asyncio.sleep(0.05)
        return short, renewed

    assert run(main, redis.url) == (True, True)
    assert redis.command(b"GET", f"{PREFIX}ref:r".encode()) == b"$4\r\ntext\r\n"
