"""The load generator: its own process, raw HTTP/1.1 over asyncio streams (uvloop when present).

Python rather than wrk: it must time the first SSE *event* (not the first byte of headers), count
the chunks a proxy relays, check every response, and send a distinct body per request for the
"cold" runs; and it uses its own process, so its CPU is never charged to a server under test. It
is fast enough here: tens of microseconds per request, far below any proxy's cost.

The runner drives it over stdin/stdout, one JSON object per line, in two steps so the CPU it reads
from /proc brackets only the measured requests:

    {"cmd": "prepare", "port": P, "path": "/v1/chat/completions", "body": FILE, "sse": true,
     "cold": false, "concurrency": 64, "warmup": 2, "headers": {}}   -> {"ok": true}
    {"cmd": "go", "duration": 1.0, "max_requests": null}             -> {"n": ..., "lat": [...]}
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.overhead.bodies import NONCE, WARM_NONCE

HOST = "127.0.0.1"
# uvicorn closes a keep-alive connection idle for 5 s (its default): a connection idle for
# longer is reopened, as httpx and aiohttp do (their pools expire idle connections), or a
# request written while the server closes it reads nothing (IncompleteReadError, 0 bytes).
# Cold 64-way rounds take seconds, so connections do idle that long between rounds.
KEEPALIVE_EXPIRY = 4.0


class ResponseError(Exception):
    pass


@dataclass
class Result:
    """One response: total latency, time to first byte/event, how it arrived."""

    latency: float
    ttfb: float
    chunks: int
    events: int
    headers: dict[str, str] = field(default_factory=dict)


class Conn:
    """One keep-alive connection; one request at a time (clients of a chat API do not pipeline)."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.idle_since = 0.0

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port, limit=1 << 20)
        self.idle_since = time.perf_counter()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None

    async def request(self, raw: bytes, sse: bool, want_headers: bool = False) -> Result:
        stale = self.reader is not None and (
            self.reader.at_eof() or time.perf_counter() - self.idle_since > KEEPALIVE_EXPIRY
        )
        if stale:
            await self.close()
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        reader = self.reader
        start = time.perf_counter()
        self.writer.write(raw)
        head = await reader.readuntil(b"\r\n\r\n")
        t_head = time.perf_counter()
        status = head[9:12]
        lower = head.lower()
        headers = _headers(head) if want_headers else {}
        chunks = 0
        first_event = 0.0
        parts: list[bytes] = []
        if b"\r\ntransfer-encoding: chunked" in lower:
            while True:
                line = await reader.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers: the final CRLF
                    break
                data = (await reader.readexactly(size + 2))[:-2]
                chunks += 1
                if not first_event and b"data:" in data:
                    first_event = time.perf_counter()
                parts.append(data)
        else:
            i = lower.find(b"\r\ncontent-length:")
            if i < 0:
                raise ResponseError(f"no content-length nor chunked: {head[:200]!r}")
            n = int(lower[i + 17 : lower.find(b"\r\n", i + 17)].strip())
            parts.append(await reader.readexactly(n))
            chunks = 1
        end = self.idle_since = time.perf_counter()
        body = b"".join(parts)
        if b"\r\nconnection: close" in lower:
            await self.close()
        if status != b"200":
            raise ResponseError(f"status {status.decode()}: {body[:300]!r}")
        if sse:
            if not body.rstrip().endswith(b"data: [DONE]"):
                raise ResponseError(f"SSE stream did not end with [DONE]: {body[-200:]!r}")
            events = body.count(b"data:")
            ttfb = (first_event or end) - start
        else:
            if b'"chat.completion"' not in body:
                raise ResponseError(f"not a chat completion: {body[:300]!r}")
            events = 0
            ttfb = t_head - start
        return Result(end - start, ttfb, chunks, events, headers)


def _headers(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k:
            out[k.strip().lower()] = v.strip()
    return out


class Job:
    """A prepared run: open connections, a body source, then a measured phase."""

    nonces = itertools.count(int.from_bytes(os.urandom(6), "big") % 10**15)

    def __init__(self, spec: dict[str, Any], templates: dict[str, bytes]):
        self.port: int = spec["port"]
        self.sse: bool = spec["sse"]
        self.cold: bool = spec.get("cold", False)
        self.concurrency: int = spec["concurrency"]
        path = spec["body"]
        if path not in templates:
            with open(path, "rb") as f:
                templates[path] = f.read()
        template = templates[path]
        head = (
            f"POST {spec.get('path', '/v1/chat/completions')} HTTP/1.1\r\n"
            f"host: {HOST}:{self.port}\r\n"
            "content-type: application/json\r\n"
            "accept: application/json\r\n"
            "authorization: Bearer sk-bench\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in spec.get("headers", {}).items())
            + f"content-length: {len(template)}\r\n\r\n"
        ).encode()
        self.head = head
        self.template = template
        self.warm_raw = head + template.replace(NONCE, WARM_NONCE)
        self.conns = [Conn(self.port) for _ in range(self.concurrency)]
        self.errors: list[str] = []

    def raw(self) -> bytes:
        if not self.cold:
            return self.warm_raw
        nonce = b"nonce-%016d" % next(self.nonces)
        return self.head + self.template.replace(NONCE, nonce)

    async def prepare(self, warmup: int) -> None:
        await asyncio.gather(*(c.open() for c in self.conns))
        # Warm every connection (and the server's code paths) outside the measured phase.
        for _ in range(warmup):
            await asyncio.gather(*(self._one(c, []) for c in self.conns))

    async def _one(self, conn: Conn, out: list[Result], want_headers: bool = False) -> None:
        try:
            out.append(await conn.request(self.raw(), self.sse, want_headers))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            self._error(conn, e)
        except ResponseError as e:
            self._error(conn, e)

    def _error(self, conn: Conn, e: Exception) -> None:
        self.errors.append(f"{type(e).__name__}: {e}"[:400])
        # The connection's state is unknown: start the next request on a fresh one.
        conn.reader = conn.writer = None

    async def go(self, duration: float, max_requests: int | None) -> dict[str, Any]:
        self.errors = []
        results: list[Result] = []
        issued = 0
        start = time.perf_counter()
        deadline = start + duration

        async def worker(conn: Conn, first: bool) -> None:
            nonlocal issued
            while time.perf_counter() < deadline and (
                max_requests is None or issued < max_requests
            ):
                issued += 1
                await self._one(conn, results, want_headers=first)
                first = False

        await asyncio.gather(*(worker(c, i == 0) for i, c in enumerate(self.conns)))
        elapsed = time.perf_counter() - start
        await asyncio.gather(*(c.close() for c in self.conns))
        headers = next((r.headers for r in results if r.headers), {})
        return {
            "n": len(results),
            "elapsed": elapsed,
            "errors": len(self.errors),
            "error_samples": self.errors[:5],
            "lat": [round(r.latency, 6) for r in results],
            "ttfb": [round(r.ttfb, 6) for r in results],
            "chunks": sum(r.chunks for r in results),
            "events": sum(r.events for r in results),
            "headers": {k: v for k, v in headers.items() if k.startswith("x-shrink")},
        }


async def run() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    templates: dict[str, bytes] = {}
    job: Job | None = None
    while line := await reader.readline():
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "prepare":
            job = Job(msg, templates)
            await job.prepare(msg.get("warmup", 1))
            reply: dict[str, Any] = {"ok": True, "warmup_errors": job.errors[:5]}
        elif cmd == "go":
            assert job is not None
            reply = await job.go(msg["duration"], msg.get("max_requests"))
            job = None
        elif cmd == "quit":
            return
        else:
            reply = {"error": f"unknown command {cmd}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def main() -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(run())
    else:
        uvloop.run(run())


if __name__ == "__main__":
    main()
