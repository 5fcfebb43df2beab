"""Window discovery against fake backends under a real uvicorn on loopback."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from proxy.discovery import WindowDiscovery
from proxy.overflow import parse_overflow
from tests.fakes.backends import FakeBackend
from tests.fakes.server import serve

MODEL = "test-model"
Start = Callable[..., tuple[FakeBackend, str]]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def start() -> Iterator[Start]:
    """start(flavour, **fields) -> (fake, base URL including the backend's /v1 prefix)."""
    with ExitStack() as stack:

        def run(flavour: str, **fields: Any) -> tuple[FakeBackend, str]:
            fake = FakeBackend(flavour, **fields)
            url = stack.enter_context(serve(fake.app()))
            return fake, url + fake.prefix

        yield run


def run_with(base: str, body: Callable[[WindowDiscovery], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with httpx.AsyncClient(trust_env=False) as client:
            discovery = WindowDiscovery(client, base, **options)
            try:
                return await body(discovery)
            finally:
                await discovery.aclose()

    return asyncio.run(main())


def discover(base: str, model: str = MODEL, **options: Any) -> int | None:
    return run_with(base, lambda d: d.window_for(model), **options)


@pytest.mark.parametrize(
    ("flavour", "fields"),
    [
        ("vllm", {}),
        ("llamacpp", {}),
        ("llamacpp", {"props_shape": "top"}),
        ("llamacpp", {"props_shape": "slots"}),
        ("ollama", {}),
        ("lmstudio", {}),
        ("openrouter", {"model": "meta-llama/llama-3.1-8b-instruct"}),
    ],
)
def test_each_backend_states_its_served_window(start: Start, flavour: str, fields: dict) -> None:
    fake, base = start(flavour, window=6144, **fields)
    assert discover(base, fake.model) == 6144


def test_each_probe_is_tried_in_order_and_stops_at_the_first_answer(start: Start) -> None:
    fake, base = start("ollama", window=4096)
    assert discover(base) == 4096
    assert fake.hits == {"/v1/models": 1, "/props": 1, "/api/ps": 1}
    assert fake.hits["/api/show"] == 0  # the trained maximum is never asked for


def test_llamacpp_trained_maximum_in_models_is_ignored(start: Start) -> None:
    fake, base = start("llamacpp", window=4096, trained=131072)
    assert discover(base) == 4096
    assert fake.hits["/props"] == 1


def test_ollama_untagged_name_matches_latest(start: Start) -> None:
    fake, base = start("ollama", model="llama3", window=8192)
    assert discover(base, "llama3") == 8192
    assert discover(base, "llama3:latest") == 8192
    assert discover(base, "llama3:70b") is None


def test_ollama_model_not_loaded_is_asked_again_soon(start: Start) -> None:
    fake, base = start("ollama", window=4096, loaded=False)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[int | None]:
        first = await d.window_for(MODEL)
        fake.loaded = True  # the first chat request loads it
        clock.now += 5
        cached = await d.window_for(MODEL)
        clock.now += 11  # past `recheck`, far before the TTL
        return [first, cached, await d.window_for(MODEL)]

    assert run_with(base, body, clock=clock, ttl=300, recheck=15) == [None, None, 4096]
    assert fake.hits["/api/ps"] == 2


def test_lmstudio_prefers_loaded_context_length(start: Start) -> None:
    fake, base = start("lmstudio", window=8192, trained=32768)
    assert discover(base) == 8192


def test_lmstudio_without_loaded_length_uses_max_and_asks_again_soon(start: Start) -> None:
    fake, base = start("lmstudio", window=8192, trained=32768, loaded=False)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[int | None]:
        first = await d.window_for(MODEL)
        fake.loaded = True
        clock.now += 20
        return [first, await d.window_for(MODEL)]

    assert run_with(base, body, clock=clock, recheck=15) == [32768, 8192]


def test_unknown_model_and_backend_without_windows_give_none(start: Start) -> None:
    fake, base = start("vllm", window=8192)
    assert discover(base, "other-model") is None
    fake, base = start("openai")
    assert discover(base, MODEL) is None
    assert fake.hits == {"/v1/models": 1, "/props": 1, "/api/ps": 1, "/api/v0/models": 1}


def test_results_are_cached_for_the_ttl(start: Start) -> None:
    fake, base = start("vllm", window=8192)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[int | None]:
        out = [await d.window_for(MODEL), await d.window_for(MODEL)]
        fake.window = 16384  # the server restarts with a larger window
        clock.now += 299
        out.append(await d.window_for(MODEL))
        clock.now += 2
        out.append(await d.window_for(MODEL))
        return out

    assert run_with(base, body, clock=clock, ttl=300) == [8192, 8192, 8192, 16384]
    assert fake.hits["/v1/models"] == 2


def test_slow_backend_gives_none_quickly_and_is_probed_again_only_after_ttl(
    start: Start,
) -> None:
    fake, base = start("vllm", delay=5.0)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[tuple[int | None, float]]:
        out = []
        for advance in (0, 10, 291):
            clock.now += advance
            t0 = time.perf_counter()
            out.append((await d.window_for(MODEL), time.perf_counter() - t0))
        return out

    (first, t1), (second, t2), (third, t3) = run_with(base, body, clock=clock, ttl=300, timeout=0.3)
    assert (first, second, third) == (None, None, None)
    assert t1 < 1.5 and t3 < 1.5  # one timeout, not one per probe
    assert t2 < 0.05  # the failure is cached
    assert fake.hits["/v1/models"] == 2
    assert fake.hits["/props"] == 0  # a backend that does not answer is not asked four times


def test_unreachable_backend_gives_none() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    t0 = time.perf_counter()
    assert discover(f"http://127.0.0.1:{port}/v1") is None
    assert time.perf_counter() - t0 < 2


def test_failing_backend_is_logged_once_per_model(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake, base = start("vllm", fail_status=500)
    clock = Clock()

    async def body(d: WindowDiscovery) -> None:
        for _ in range(3):
            await d.window_for(MODEL)
            await d.window_for(MODEL)
            clock.now += 301

    with caplog.at_level(logging.INFO, logger="proxy.discovery"):
        run_with(base, body, clock=clock, ttl=300)
    assert fake.hits["/v1/models"] == 3
    lines = [r for r in caplog.records if "not discovered" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO


def test_concurrent_calls_share_one_probe(start: Start) -> None:
    fake, base = start("vllm", window=8192, delay=0.2)

    async def body(d: WindowDiscovery) -> list[int | None]:
        return list(await asyncio.gather(*(d.window_for(MODEL) for _ in range(20))))

    assert run_with(base, body) == [8192] * 20
    assert fake.hits["/v1/models"] == 1


def test_a_cancelled_caller_does_not_cancel_the_shared_probe(start: Start) -> None:
    fake, base = start("vllm", window=8192, delay=0.2)

    async def body(d: WindowDiscovery) -> int | None:
        first = asyncio.ensure_future(d.window_for(MODEL))
        second = asyncio.ensure_future(d.window_for(MODEL))
        await asyncio.sleep(0.05)
        first.cancel()
        return await second

    assert run_with(base, body) == 8192
    assert fake.hits["/v1/models"] == 1


def test_remember_overrides_discovery_until_the_ttl(start: Start) -> None:
    fake, base = start("vllm", window=8192)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[Any]:
        out: list[Any] = [await d.window_for(MODEL)]
        d.remember(MODEL, 4096)
        out += [await d.window_for(MODEL), d.snapshot()]
        clock.now += 301
        out.append(await d.window_for(MODEL))
        return out

    assert run_with(base, body, clock=clock, ttl=300) == [8192, 4096, {MODEL: 4096}, 8192]
    assert fake.hits["/v1/models"] == 2


def test_remember_during_a_probe_wins(start: Start) -> None:
    fake, base = start("vllm", window=8192, delay=0.2)

    async def body(d: WindowDiscovery) -> list[int | None]:
        pending = asyncio.ensure_future(d.window_for(MODEL))
        await asyncio.sleep(0.05)
        d.remember(MODEL, 2048)
        return [await pending, await d.window_for(MODEL)]

    assert run_with(base, body) == [2048, 2048]


def test_remember_learns_from_a_real_overflow_answer(start: Start) -> None:
    fake, base = start("llamacpp", window=2048)
    r = httpx.post(
        base + "/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-fake-prompt-tokens": "3000"},
    )
    overflow = parse_overflow(r.status_code, r.content)
    assert overflow is not None and overflow.limit == 2048

    async def body(d: WindowDiscovery) -> int | None:
        d.remember(MODEL, overflow.limit)
        return await d.window_for(MODEL)

    assert run_with(base, body) == 2048
    assert fake.hits["/props"] == 0


def test_probe_sends_the_configured_auth_headers(start: Start) -> None:
    fake, base = start("openrouter", window=128000)
    got = discover(base, headers=lambda: [("authorization", "Bearer sk-or-test")])
    assert got == 128000
    assert fake.headers_seen[0]["authorization"] == "Bearer sk-or-test"


def test_snapshot_and_bounded_cache(start: Start) -> None:
    fake, base = start("vllm", window=8192)

    async def body(d: WindowDiscovery) -> dict[str, int]:
        for name in ("a", "b", "c", MODEL):
            await d.window_for(name)
        return d.snapshot()

    assert run_with(base, body, max_models=2) == {MODEL: 8192}


def test_forget_drops_discovered_but_not_remembered_windows(start: Start) -> None:
    fake, base = start("vllm", window=8192)
    clock = Clock()

    async def body(d: WindowDiscovery) -> list[int | None]:
        out = [await d.window_for(MODEL)]
        d.forget(MODEL)  # right after a probe: ignored (no probe storm per request)
        out.append(await d.window_for(MODEL))
        clock.now += 16  # past `recheck`
        d.forget(MODEL)
        out.append(await d.window_for(MODEL))  # probed again
        d.remember(MODEL, 4096)
        clock.now += 16
        d.forget(MODEL)
        out.append(await d.window_for(MODEL))  # the stated limit stays
        return out

    assert run_with(base, body, clock=clock, ttl=300, recheck=15) == [8192, 8192, 8192, 4096]
    assert fake.hits["/v1/models"] == 2


def test_junk_windows_are_ignored(start: Start) -> None:
    fake, base = start("vllm", window=0)
    assert discover(base) is None
    fake, base = start("vllm", window=-1)
    assert discover(base) is None
