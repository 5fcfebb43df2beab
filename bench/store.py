"""What shared state on Redis costs: store latencies embedded vs Redis, and per request.

    .venv/bin/python -m bench.store [--ops 2000] [--requests 100]

Starts Debian's `redis-server` on a free loopback port (nothing persisted) and prints:

- per operation (median and p99, microseconds): the embedded MemoryStore's put and get; the
  RedisStore's put (local, then one SET to Redis, awaited), get served by its local tier, and
  get of a ref another replica put (a local miss read from Redis); a summary read through from
  Redis (`SharedSummaryCache.fetch`);
- per request (milliseconds): a chat request whose large tool result is compacted (so its
  original is put in the store before the request goes upstream, a new ref every request)
  through the proxy, embedded vs SHRINK_STORE_URL, against a loopback fake upstream; the ratio
  is the one to read, the machine being shared.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.app import create_app
from proxy.redis_link import RedisLink
from proxy.retrieval.redis import RedisStore
from proxy.retrieval.store import MemoryStore
from proxy.settings import Settings
from proxy.summary_cache import KEY as SUMMARY_KEY
from proxy.summary_cache import LRUSummaryCache, SharedSummaryCache

TEXT = "x" * 4000  # a compacted tool result's original, roughly


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench.store: redis-server not found (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        proc = subprocess.Popen(
            [*argv, "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(500):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.01)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait()


async def timed(n: int, op: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    """(median, p99) microseconds of `op(i)` for i in range(n)."""
    times = []
    for i in range(n):
        began = time.perf_counter()
        await op(i)
        times.append((time.perf_counter() - began) * 1e6)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


async def store_latencies(url: str, n: int) -> dict[str, tuple[float, float]]:
    memory = MemoryStore(max_items=n * 2)
    a = RedisLink.from_url(url, timeout=1.0, retry=1.0)
    b = RedisLink.from_url(url, timeout=1.0, retry=1.0)
    one = RedisStore(a, MemoryStore(max_items=n * 2), ttl=600, max_chars=10**6)
    two = RedisStore(b, MemoryStore(max_items=n * 2), ttl=600, max_chars=10**6)
    cache_b = SharedSummaryCache(b, LRUSummaryCache(n * 2), ttl=600, max_chars=10**6)
    try:
        out = {
            "embedded put": await timed(n, lambda i: memory.put({f"m{i}": TEXT})),
            "embedded get": await timed(n, lambda i: memory.get(f"m{i}")),
            "redis put (write-through)": await timed(n, lambda i: one.put({f"r{i}": TEXT})),
            "redis get, local tier": await timed(n, lambda i: one.get(f"r{i}")),
            "redis get, other replica's": await timed(n, lambda i: two.get(f"r{i}")),
        }
        for i in range(n):  # as cache_a.put writes them behind, here awaited
            await a.client.set(SUMMARY_KEY + f"s{i}", TEXT[:2000], px=600_000)
        out["summary fetch, other replica's"] = await timed(n, lambda i: cache_b.fetch(f"s{i}"))
        return out
    finally:
        await a.aclose()
        await b.aclose()


async def upstream_chat(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
    )


class Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread
        pass


@contextmanager
def serve(app: Any) -> Iterator[str]:
    port = free_port()
    server = Server(uvicorn.Config(app, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def request_body(i: int) -> dict[str, Any]:
    log = "\n".join(f"{i}: line {n} of a long build log, nothing special" for n in range(400))
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": log},
            {"role": "user", "content": "what failed?"},
        ],
    }


def request_ms(upstream: str, n: int, **settings: Any) -> list[float]:
    app = create_app(
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            upstream_url=upstream + "/v1",
            discover_window=False,
            tool_max_tokens=256,
            **settings,
        )
    )
    times = []
    with serve(app) as url, httpx.Client(timeout=30) as client:
        client.post(url + "/v1/chat/completions", json=request_body(-1))  # warm
        for i in range(n):
            began = time.perf_counter()
            r = client.post(url + "/v1/chat/completions", json=request_body(i))
            times.append((time.perf_counter() - began) * 1e3)
            assert r.status_code == 200, r.text
        kept = app.state.shrink.retrieval.info()["entries"]
    assert kept >= n, f"only {kept} originals kept: the requests were not compacted"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with redis_server() as url:
        print(f"store operations ({args.ops} each, 4 KB texts): median / p99 microseconds")
        for name, (median, p99) in asyncio.run(store_latencies(url, args.ops)).items():
            print(f"  {name:32} {median:8.1f} {p99:8.1f}")
        routes = [Route("/v1/chat/completions", upstream_chat, methods=["POST"])]
        with serve(Starlette(routes=routes)) as upstream:
            embedded = request_ms(upstream, args.requests)
            shared = request_ms(upstream, args.requests, store_url=url)
    e, s = statistics.median(embedded), statistics.median(shared)
    print(f"requests ({args.requests}, a 400-line tool result compacted, new ref each): median ms")
    print(f"  embedded {e:6.2f}   redis {s:6.2f}   ratio {s / e:4.2f}   overhead {s - e:+.2f} ms")


if __name__ == "__main__":
    main()
