"""The proxy as its own process under hostile clients: leaks, backpressure, SIGTERM.

Measured only from outside (psutil): the process's RSS and its ESTABLISHED TCP connections to
the upstream port, plus what the fault server saw on its side. Bounds are stated with each test;
they are loose enough for a busy shared machine and still far below what a leak would show.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time

import httpx
import orjson
import pytest

from tests.fakes import faulty
from tests.proxy_process import proxy_process

pytestmark = pytest.mark.slow

MB = 1024 * 1024
BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(BODY)}\r\n\r\n".encode()
    + BODY
)
ABORTS = 1000
CONCURRENCY = 50
# RSS may grow this much over 1,000 aborted streams (allocator arenas, caches). A leak of the
# response, its buffers or its tasks costs tens of kB per stream: 20+ MB over 1,000.
ABORT_RSS_BOUND = 15 * MB
# The slow client's stream is 50 MB; what the proxy may hold while the client does not read.
BACKPRESSURE_RSS_BOUND = 20 * MB


def wait_until(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


async def aborted_stream(port: int, i: int) -> str | None:
    """One client that leaves early; returns what went wrong, or None.

    Three ways to leave, in turn: after the first event (FIN), after the first event (RST),
    and at a time between 0 and 60 ms after sending, which spans "before the upstream answered",
    "while headers are on their way" and "mid-stream".
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(REQUEST)
        await writer.drain()
        if i % 3 == 2:
            await asyncio.sleep((i * 7 % 60) / 1000)
            return None
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return head.split(b"\r\n", 1)[0].decode()
        seen = b""
        while b"data:" not in seen:
            more = await reader.read(4096)
            if not more:
                return "stream ended before the first event"
            seen += more
        if i % 3 == 1:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        return None
    except (OSError, asyncio.IncompleteReadError) as exc:
        return repr(exc)
    finally:
        if i % 3 == 1:
            writer.transport.abort()
        else:
            writer.close()


async def abort_many(port: int, n: int, concurrency: int) -> list[str]:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str | None:
        async with sem:
            async with asyncio.timeout(10):
                return await aborted_stream(port, i)

    results = await asyncio.gather(*(one(i) for i in range(n)))
    return [r for r in results if r is not None]


def test_thousand_aborted_streams_leave_nothing_behind():
    with (
        faulty.sse(events=100_000, gap=0.01, size=200, head_delay=0.02) as up,
        proxy_process(up.url) as proxy,
    ):
        assert asyncio.run(abort_many(proxy.port, 60, 20)) == []  # warm-up
        assert wait_until(lambda: proxy.connections_to(up.port) == 0)
        rss_before = proxy.rss()
        t0 = time.monotonic()
        failures = asyncio.run(abort_many(proxy.port, ABORTS, CONCURRENCY))
        elapsed = time.monotonic() - t0
        assert failures == [], failures[:5]
        # Every upstream connection is released: none left ESTABLISHED in the proxy process,
        # none left open on the upstream's side.
        assert wait_until(lambda: proxy.connections_to(up.port) == 0 and up.open == 0), (
            proxy.connections_to(up.port),
            up.open,
        )
        growth = proxy.rss() - rss_before
        print(f"\n{ABORTS} aborted streams in {elapsed:.1f}s; RSS growth {growth / MB:.1f} MB")
        assert growth < ABORT_RSS_BOUND
        assert httpx.get(proxy.url + "/healthz").status_code == 200
    log = proxy.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


def test_slow_client_is_backpressured_not_buffered():
    """A client that stops reading a 50 MB stream: the proxy stops reading the upstream."""
    events, size = 6400, 8192  # 50 MB of SSE, as fast as the upstream can write
    with (
        faulty.sse(events=events, size=size) as up,
        proxy_process(up.url) as proxy,
        socket.socket() as s,
    ):
        rss_before = proxy.rss()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.connect(("127.0.0.1", proxy.port))
        s.sendall(REQUEST)
        got = bytearray(s.recv(65536))
        peak = 0
        for _ in range(20):  # 2 s of not reading at all
            time.sleep(0.1)
            peak = max(peak, proxy.rss() - rss_before)
        sent_while_stalled = up.sent
        # Then read slowly (256 kB every 20 ms) for a while, still sampling.
        s.settimeout(10)
        for i in range(100):
            got += s.recv(256 * 1024)
            time.sleep(0.02)
            if i % 10 == 0:
                peak = max(peak, proxy.rss() - rss_before)
        # Then drain fast: the whole stream must arrive intact.
        while chunk := s.recv(1 << 20):
            got += chunk
    print(
        f"\nupstream pushed {sent_while_stalled / MB:.1f} MB while the client read nothing; "
        f"proxy RSS peak growth {peak / MB:.1f} MB for a {events * size / MB:.0f} MB stream"
    )
    assert sent_while_stalled < events * size / 2, "the proxy kept reading a stalled stream"
    assert peak < BACKPRESSURE_RSS_BOUND
    assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert got.count(b"data: ") == events + 1


def test_sigterm_refuses_new_connections_and_drains_in_flight_stream():
    """SIGTERM: stop accepting, let the open stream finish (within the grace period), exit 0."""
    with faulty.sse(events=15, gap=0.1) as up, proxy_process(up.url) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(REQUEST)
            data = s.recv(65536)
            assert data.startswith(b"HTTP/1.1 200")
            proxy.proc.send_signal(signal.SIGTERM)
            assert wait_until(lambda: refused(proxy.port), 3), "still accepting after SIGTERM"
            while more := s.recv(65536):
                data += more
        assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert data.count(b"data: ") == 16  # 15 events and [DONE]: nothing lost
        assert proxy.proc.wait(timeout=10) == 0
    assert "Traceback" not in proxy.log()


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_event_stream_without_blank_lines_is_not_buffered_whole():
    """An upstream that calls 40 MB without a single event boundary an event stream: the proxy
    must pass it on as it comes (memory bounded), not hold it all until the end.

    The first streamed request costs the proxy ~10 MB of one-off allocations; holding the
    stream would cost 40 MB more, so half the stream's size separates the two."""
    size = 40 * MB
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        + f"content-length: {size}\r\n\r\n".encode()
    )
    with faulty.malformed(head + b"x" * size) as up, proxy_process(up.url) as proxy:
        rss_before = proxy.rss()
        peak = 0
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            s.sendall(REQUEST)
            got = 0
            while chunk := s.recv(1 << 16):
                got += len(chunk)
                if got % (1 << 20) < (1 << 16):
                    peak = max(peak, proxy.rss() - rss_before)
                    time.sleep(0.005)  # a client slower than loopback
                if got >= size:
                    break
    print(f"\nproxy RSS peak growth {peak / MB:.1f} MB for {size / MB:.0f} MB without boundaries")
    assert got >= size
    assert peak < size / 2
