"""The idle timeout of an upstream body: only time spent waiting for the next chunk counts.

Upstream.iter_body over a real httpx.Response whose stream is paced by asyncio sleeps; timeouts
are short so the whole module runs in about two seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.errors import UpstreamTimeout
from proxy.upstream import Timeouts, Upstream

IDLE = 0.3


class Paced(httpx.AsyncByteStream):
    def __init__(self, gaps: list[float]):
        self.gaps = gaps
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, gap in enumerate(self.gaps):
            await asyncio.sleep(gap)
            yield b"chunk %d\n" % i

    async def aclose(self) -> None:
        self.closed = True


def upstream() -> Upstream:
    return Upstream(
        "http://127.0.0.1:9/v1",
        api_key=None,
        timeouts=Timeouts(connect=1, first_byte=1, idle=IDLE, write=1),
        max_connections=1,
    )


async def read(gaps: list[float], consumer_pause: float = 0.0) -> list[bytes]:
    up = upstream()
    try:
        out = []
        async for chunk in up.iter_body(httpx.Response(200, stream=Paced(gaps))):
            out.append(chunk)
            await asyncio.sleep(consumer_pause)  # a slow client: not the upstream's idleness
        return out
    finally:
        await up.aclose()


def test_gaps_under_the_timeout_never_fire_however_long_the_body() -> None:
    start = time.monotonic()
    assert len(asyncio.run(read([0.2] * 6))) == 6  # 1.2 s in all, 4x the idle timeout
    assert time.monotonic() - start >= 1.2


def test_time_spent_by_a_slow_consumer_is_not_idle_time() -> None:
    assert len(asyncio.run(read([0.0, 0.0, 0.0], consumer_pause=2 * IDLE))) == 3


def test_a_gap_over_the_timeout_raises_upstream_timeout_in_time() -> None:
    start = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="sent nothing"):
        asyncio.run(read([0.0, 0.1, 5.0]))
    assert time.monotonic() - start < 0.1 + IDLE + 1.0  # not the 5 s gap


def test_a_cancel_from_elsewhere_is_not_mistaken_for_the_timeout() -> None:
    async def run() -> None:
        task = asyncio.create_task(read([0.0, 5.0]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
