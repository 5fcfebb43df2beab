"""Heap trimming: glibc's malloc_trim after large request bodies, once per interval."""

from __future__ import annotations

import asyncio
import sys
import time

import httpx
import pytest

from proxy.heap import LARGE_BODY, HeapTrimmer, _load_trim


class Recorder:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pad: int) -> int:
        self.calls.append(pad)
        return 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_real_malloc_trim_loads_and_runs_here():
    trim = _load_trim()
    assert trim is not None
    assert trim(0) in (0, 1)


def test_only_a_large_body_makes_a_trim_due_and_one_trim_clears_it():
    trim, trims = Recorder(), []
    heap = HeapTrimmer(1.0, trim=trim, on_trim=lambda: trims.append(1))
    heap.note(LARGE_BODY - 1)
    assert heap.trim_if_pending() is False
    heap.note(LARGE_BODY)
    heap.note(10 * LARGE_BODY)  # several large bodies in one interval: one trim
    assert heap.trim_if_pending() is True
    assert heap.trim_if_pending() is False
    assert trim.calls == [0] and trims == [1]


def test_interval_zero_turns_it_off():
    heap = HeapTrimmer(0, trim=Recorder())
    assert not heap.enabled
    heap.note(10 * LARGE_BODY)
    asyncio.run(asyncio.wait_for(heap.run(), 1))  # returns at once instead of looping


def test_the_background_task_trims_after_a_large_body_and_not_otherwise():
    trim = Recorder()
    heap = HeapTrimmer(0.01, trim=trim)

    async def scenario() -> None:
        task = asyncio.create_task(heap.run())
        await asyncio.sleep(0.1)
        assert trim.calls == []  # nothing large seen: no trims however long it runs
        heap.note(LARGE_BODY)
        for _ in range(200):
            if trim.calls:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    assert trim.calls == [0]


def trims_reported(base: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("shrink_heap_trims_total "))
    return float(line.split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_a_large_chat_request_through_the_proxy_is_followed_by_a_trim(start_proxy):
    base = start_proxy(heap_trim_interval=0.05)
    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{base}/v1/chat/completions", json=small).status_code == 200
    time.sleep(0.3)
    assert trims_reported(base) == 0
    large = {"model": "m", "messages": [{"role": "user", "content": "word " * LARGE_BODY}]}
    # Passed through unshrunk (one user message this large fits no default window).
    sent = httpx.post(f"{base}/v1/chat/completions", json=large, headers={"x-shrink-mode": "off"})
    assert sent.status_code == 200
    deadline = time.monotonic() + 10
    while trims_reported(base) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trims_reported(base) == 1
