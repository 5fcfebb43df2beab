"""Streaming load on raw asyncio sockets, for bench/load.py and bench/soak.py.

The client must not be the bottleneck on a 2-core machine, so it speaks just enough HTTP/1.1:
one keep-alive connection per worker, a canned request, a response read until the terminating
chunk. The fake upstream is bench/overhead/upstream.py in its own process (events paced by the
`x-bench-gap-ms` header, which the proxy forwards like any end-to-end header); the proxy is
`python -m proxy serve` in its own process. Figures come from /proc (bench/overhead/procs.py).
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.overhead.procs import Server, free_port, python_module  # noqa: E402
from tests.shared_dir import use_offline_encodings  # noqa: E402

BODY = (
    b'{"model":"qwen2.5-coder:7b","stream":true,"messages":[{"role":"system","content":"Be '
    b'brief."},{"role":"user","content":"Explain backpressure in one paragraph."}]}'
)
END = b"\r\n0\r\n\r\n"


def request(events: int, gap_ms: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\nauthorization: Bearer sk-bench\r\n"
        b"x-bench-chunks: %d\r\nx-bench-gap-ms: %d\r\ncontent-length: %d\r\n\r\n%s"
        % (events, gap_ms, len(BODY), BODY)
    )


def raise_fd_limit() -> int:
    """500 streams through a proxy are 1,000+ sockets in one process; children inherit this."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass
class Tally:
    ttfb: list[float] = field(default_factory=list)  # request sent -> first event
    total: list[float] = field(default_factory=list)  # request sent -> terminating chunk
    errors: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.ttfb += other.ttfb
        self.total += other.total
        self.errors += other.errors


async def stream_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes, events: int, t: Tally
) -> bool:
    """One streamed request on an open connection; False when the connection is unusable."""
    started = time.perf_counter()
    writer.write(raw)
    first = None
    buf = b""
    try:
        async with asyncio.timeout(60):
            while not buf.endswith(END):
                chunk = await reader.read(65536)
                if not chunk:
                    t.errors.append("connection closed mid-response")
                    return False
                if first is None and b"data:" in chunk:
                    first = time.perf_counter()
                buf += chunk
                if b"\r\n\r\n" in buf and not buf.startswith(b"HTTP/1.1 200"):
                    t.errors.append(buf.split(b"\r\n", 1)[0].decode(errors="replace"))
                    return False
    except (OSError, TimeoutError) as exc:
        t.errors.append(repr(exc))
        return False
    done = time.perf_counter()
    if buf.count(b"data: ") != events + 1 or b"data: [DONE]" not in buf:
        t.errors.append(f"incomplete stream: {buf.count(b'data: ')} events")
        return True
    t.ttfb.append((first or done) - started)
    t.total.append(done - started)
    return True


async def worker(
    port: int, raw: bytes, events: int, until: float, rounds: int, t: Tally, delay: float = 0.0
) -> None:
    """Streams back to back on one keep-alive connection (reconnecting if it breaks)."""
    await asyncio.sleep(delay)
    done = 0
    while done < rounds and time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        except OSError as exc:
            t.errors.append(repr(exc))
            await asyncio.sleep(0.1)
            continue
        try:
            while done < rounds and time.monotonic() < until:
                done += 1
                if not await stream_once(reader, writer, raw, events, t):
                    break
        finally:
            writer.close()


async def run_load(
    port: int, concurrency: int, events: int, gap_ms: int, *, rounds: int, seconds: float
) -> Tally:
    """`concurrency` workers, each doing `rounds` streams or until `seconds` pass.

    Worker starts are spread over one stream's duration, so the load is `concurrency` streams
    in flight with a steady arrival rate, not waves of simultaneous requests.
    """
    t = Tally()
    raw = request(events, gap_ms)
    until = time.monotonic() + seconds
    spread = events * gap_ms / 1000 / concurrency
    await asyncio.gather(
        *(worker(port, raw, events, until, rounds, t, i * spread) for i in range(concurrency))
    )
    return t


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (
        f"n={len(values)} p50={pct(values, 0.5) * 1000:.1f} p99={pct(values, 0.99) * 1000:.1f} "
        f"max={max(values) * 1000:.1f} mean={statistics.fmean(values) * 1000:.1f} ms"
    )


@contextmanager
def servers(
    events: int, proxy_env: dict[str, str] | None = None
) -> Iterator[tuple[Server, Server]]:
    """The fake upstream and the proxy, each in its own process; stopped by handle on exit."""
    log_dir = Path(tempfile.mkdtemp(prefix="shrink-bench-"))
    up_port, proxy_port = free_port(), free_port()
    upstream = Server(
        "upstream",
        python_module("bench.overhead.upstream", "--port", str(up_port), "--chunks", str(events)),
        up_port,
    )
    cache = use_offline_encodings(dict(os.environ))
    env = {**({"TIKTOKEN_CACHE_DIR": cache} if cache else {}), **(proxy_env or {})}
    proxy = Server(
        "proxy",
        python_module(
            "proxy",
            "serve",
            "--port",
            str(proxy_port),
            "--upstream",
            f"http://127.0.0.1:{up_port}/v1",
        ),
        proxy_port,
        env=env,
    )
    try:
        for s in (upstream, proxy):
            s.start(log_dir)
        for s in (upstream, proxy):
            s.wait_ready(60)
        yield upstream, proxy
    finally:
        proxy.stop()
        upstream.stop()
        print(f"logs: {log_dir}")
