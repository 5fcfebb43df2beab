"""Head-of-line blocking over HTTP: how long small requests wait while one heavy body is shrunk.

The proxy runs as a real `python -m proxy serve` (uvicorn) in front of bench/overhead's fake
upstream, both on 127.0.0.1, each its own process (`bench.overhead.procs`). A probe sends a small
chat request every 50 ms, open loop (a client that does not know the proxy is busy keeps
sending), each on a free connection of its own pool, and times it; first with no load, then
while one heavy case is POSTed on another connection. Errors (5xx, resets, timeouts) are
counted, never raised. A heavy request that does not finish in time leaves the proxy busy, so
the proxy is restarted before the next one.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import bodies, procs
from bench.overhead.loadgen import HOST, Conn, ResponseError
from bench.overhead.procs import Server, python_module
from bench.overhead.report import percentile

PERIOD = 0.05  # seconds between two probes
MAX_IN_FLIGHT = 400  # probes waiting at once (20 s of a stalled proxy); the rest are skipped
TAIL = 0.5  # seconds probes go on after the heavy request ended: the stall it leaves behind
KEEPALIVE_EXPIRY = 4.0  # seconds a free probe connection is reused (uvicorn keeps it 5 s)
PROBE_PATIENCE = 30.0  # seconds a probe waits at most: any longer is already a failure


def request(port: int, body: bytes) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {HOST}:{port}\r\n"
        "content-type: application/json\r\nauthorization: Bearer sk-bench\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


PROBE = bodies.encode(bodies.small_body(False)).replace(bodies.NONCE, bodies.WARM_NONCE)


def _kind(e: BaseException) -> str:
    """A label for an error: `status 502` for an HTTP status, else the exception's type."""
    if isinstance(e, ResponseError):
        return str(e).split(":", 1)[0]
    return "timeout" if isinstance(e, TimeoutError) else type(e).__name__


@dataclass
class Probes:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    skipped: int = 0

    def summary(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "probes": len(lat) + sum(self.errors.values()),
            "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000,
            "max_ms": max(lat, default=float("nan")) * 1000,
            "errors": dict(self.errors),
            "skipped": self.skipped,
        }


async def _probe(port: int, idle: list[tuple[Conn, float]], out: Probes, patience: float) -> None:
    """One probe on the most recently freed connection, after closing those idle too long for
    the server to keep them (uvicorn closes a keep-alive connection after 5 s; httpx's pool
    expires them after 5 s too, so a real client never writes into one being closed)."""
    now = time.monotonic()
    while idle and now - idle[0][1] > KEEPALIVE_EXPIRY:
        await idle.pop(0)[0].close()
    conn = idle.pop()[0] if idle else Conn(port)
    try:
        result = await asyncio.wait_for(conn.request(request(port, PROBE), False), patience)
    except (OSError, asyncio.IncompleteReadError, ResponseError, TimeoutError, ValueError) as e:
        out.errors[_kind(e)] += 1
        await conn.close()
        return
    out.latencies.append(result.latency)
    idle.append((conn, time.monotonic()))


async def _heavy(port: int, raw: bytes, patience: float) -> dict[str, Any]:
    """The heavy request's status and time, then whether its connection still serves: a
    keep-alive connection must carry the next request, or be closed with `Connection: close`
    (`closed`); `reset` is a connection dropped without saying so."""
    conn = Conn(port)
    start = time.perf_counter()
    try:
        await asyncio.wait_for(conn.request(request(port, raw), False), patience)
        status = "200"
    except (OSError, asyncio.IncompleteReadError, ResponseError, TimeoutError, ValueError) as e:
        status = _kind(e).removeprefix("status ")
    seconds = time.perf_counter() - start
    after = "closed" if conn.writer is None else "reused"
    if status == "timeout":
        after = "abandoned"  # given up on: what the connection would do next is unknown
    elif after == "reused":
        try:
            await asyncio.wait_for(conn.request(request(port, PROBE), False), patience)
        except (OSError, asyncio.IncompleteReadError, ResponseError, TimeoutError, ValueError):
            after = "reset"
    await conn.close()
    return {"status": status, "seconds": seconds, "connection": after}


async def measure(
    port: int, heavy: list[bytes], probes: int, patience: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Probe every PERIOD: `probes` times with no heavy request, else until the `heavy` bodies,
    sent at once, are answered (or `patience` seconds pass) and TAIL after. Returns the probes'
    summary and each heavy request's status and time."""
    out = Probes()
    idle: list[tuple[Conn, float]] = []
    tasks: set[asyncio.Task[None]] = set()
    jobs = [asyncio.ensure_future(_heavy(port, raw, patience)) for raw in heavy]
    start = time.perf_counter()
    n = 0
    ended: float | None = None
    while True:
        now = time.perf_counter()
        if not jobs and n >= probes:
            break
        if jobs and all(j.done() for j in jobs):
            ended = ended or now
            if now - ended >= TAIL:
                break
        tasks = {t for t in tasks if not t.done()}
        if len(tasks) < MAX_IN_FLIGHT:
            wait = min(patience, PROBE_PATIENCE)
            tasks.add(asyncio.ensure_future(_probe(port, idle, out, wait)))
        else:
            out.skipped += 1
        n += 1
        await asyncio.sleep(max(0.0, start + n * PERIOD - time.perf_counter()))
    await asyncio.gather(*tasks)
    for conn, _ in idle:
        await conn.close()
    return out.summary(), [await j for j in jobs]


def distinct(raw: bytes, k: int) -> bytes:
    """The body with `[copy k]` before every message's text: as large, and cold (no count
    or compaction of one copy serves another)."""
    body = orjson.loads(raw)
    for m in body["messages"]:
        if isinstance(m.get("content"), str):
            m["content"] = f"[copy {k}] " + m["content"]
    return orjson.dumps(body)


# Of several heavy requests' connections, the worst is reported.
_WORST = ("reused", "closed", "abandoned", "reset")


def _combined(heavies: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "status": "/".join(sorted({h["status"] for h in heavies})),
        "seconds": max(h["seconds"] for h in heavies),
        "connection": max((h["connection"] for h in heavies), key=_WORST.index),
        "each": heavies,
    }


class Proxy:
    """`python -m proxy serve` at one window and settings, against the fake upstream."""

    def __init__(self, upstream: Server, window: int, settings: dict[str, Any], tmp: Path):
        self.upstream, self.tmp = upstream, tmp
        self.env = {f"SHRINK_{k.upper()}": str(v) for k, v in settings.items()}
        cache = bodies.default_tiktoken_dir()
        self.env.update({"TIKTOKEN_CACHE_DIR": cache} if cache else {})
        (tmp / "empty.env").write_text("")
        flags = {
            "--upstream": f"http://127.0.0.1:{upstream.port}/v1",
            "--log-level": "warning",
            "--context-window": str(window),
            "--env-file": str(tmp / "empty.env"),  # a stray .env must not change what runs
        }
        self.args = [x for kv in flags.items() for x in kv]
        self.server: Server | None = None

    def start(self) -> Server:
        port = procs.free_port()
        argv = python_module("proxy", "serve", "--port", str(port), *self.args)
        self.server = Server(f"proxy-{port}", argv, port, env=self.env)
        self.server.start(self.tmp)
        self.server.wait_ready(60)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def upstream(tmp: Path) -> Server:
    port = procs.free_port()
    server = Server("upstream", python_module("bench.overhead.upstream", "--port", str(port)), port)
    server.start(tmp)
    server.wait_ready(30)
    return server


def run_case(
    proxy: Proxy, raw: bytes, probes: int, timeout: float, copies: int = 1
) -> dict[str, Any]:
    """`copies` of one heavy request at once with probes around them, on a running proxy
    (restarted after a timeout, or when it died): the probes, the heavy requests, the proxy's
    peak RSS over them."""
    server = proxy.server or proxy.start()
    procs.reset_peak_rss(server.pid)
    rss0 = procs.rss_mb(server.pid)
    bodies_ = [raw] if copies == 1 else [distinct(raw, k) for k in range(copies)]
    summary, heavies = asyncio.run(measure(server.port, bodies_, probes, timeout))
    heavy = _combined(heavies)
    alive = server.proc is not None and server.proc.poll() is None
    peak = procs.peak_rss_mb(server.pid) - rss0 if alive else float("nan")
    if heavy["status"] != "200" or not alive:
        proxy.stop()
    return {**summary, "heavy": heavy, "proxy_peak_mb": peak, "proxy_alive": alive}


def baseline(proxy: Proxy, probes: int, timeout: float) -> dict[str, Any]:
    server = proxy.server or proxy.start()
    return asyncio.run(measure(server.port, [], probes, timeout))[0]
