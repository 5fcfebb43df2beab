"""A fake OpenAI upstream on raw asyncio (uvloop when present): cheap enough not to be measured.

It must cost far less per request than any proxy in front of it, so it never parses the body: it
reads Content-Length bytes and looks for `"stream":true` with a bytes search. Responses are canned
bytes. SSE is sent chunked, one HTTP chunk per event, like real servers; a per-request header
`x-bench-gap-ms` spaces the events out (to see whether a proxy buffers) and `x-bench-chunks` sets
their number. `GET /v1/bench/headers` echoes the request head, to see what a proxy adds.

    python -m bench.overhead.upstream --port 9000 [--chunks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import cast

JSON_BODY = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"The answer is 42. '
    b'Nothing else needs to change."},"finish_reason":"stop"}]}'
)
# No `usage`: a fixed prompt_tokens far below what the proxy counted would make it conclude the
# backend truncated the prompt and re-probe the window on every request, which is not overhead.
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(JSON_BODY)).encode()
    + b"\r\n\r\n"
    + JSON_BODY
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
MODELS_BODY = b'{"object":"list","data":[{"id":"bench","object":"model","owned_by":"bench"}]}'
STREAM_MARKERS = (b'"stream":true', b'"stream": true')


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(i: int) -> bytes:
    data = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"bench","choices":[{"index":0,"delta":{"content":"tok%d "},'
        b'"finish_reason":null}]}\n\n' % i
    )
    return _chunk(data)


DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _response(status: bytes, ctype: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        ctype,
        len(body),
        body,
    )


def _header(head: bytes, name: bytes) -> bytes | None:
    """Value of one header in a raw head; a linear search, as cheap as it gets."""
    i = head.lower().find(b"\r\n" + name + b":")
    if i < 0:
        return None
    start = i + len(name) + 3
    end = head.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


class Upstream(asyncio.Protocol):
    """One connection: HTTP/1.1 keep-alive, Content-Length bodies, one request at a time."""

    def __init__(self, chunks: int, events: list[bytes]):
        self.chunks = chunks
        self.events = events
        self.buf = bytearray()
        self.head: bytes | None = None
        self.need = 0
        self.busy = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._process()

    def _process(self) -> None:
        while not self.busy and self.transport is not None:
            if self.head is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                self.head = bytes(self.buf[:end])
                del self.buf[: end + 4]
                if b"chunked" in (_header(self.head, b"transfer-encoding") or b"").lower():
                    self._fail(b"501 Not Implemented", b"chunked request bodies unsupported")
                    return
                self.need = int(_header(self.head, b"content-length") or b"0")
            if len(self.buf) < self.need:
                return
            head, need = self.head, self.need
            self.head, self.need = None, 0
            stream = any(self.buf.find(m, 0, need) >= 0 for m in STREAM_MARKERS)
            del self.buf[:need]
            self._respond(head, stream)

    def _fail(self, status: bytes, message: bytes) -> None:
        assert self.transport is not None
        self.transport.write(_response(status, b"text/plain", message))
        self.transport.close()

    def _respond(self, head: bytes, stream: bool) -> None:
        assert self.transport is not None
        line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
        method, _, rest = line.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if path.endswith(b"/chat/completions") and method == b"POST":
            if not stream:
                self.transport.write(JSON_RESPONSE)
                return
            chunks = int(_header(head, b"x-bench-chunks") or self.chunks)
            gap = float(_header(head, b"x-bench-gap-ms") or b"0") / 1000
            if gap <= 0:
                # One write per event (TCP_NODELAY: one segment each), as a model would send them.
                self.transport.write(SSE_HEAD)
                for event in self._events(chunks):
                    self.transport.write(event)
                self.transport.write(DONE)
                return
            self.busy = True
            asyncio.ensure_future(self._paced(chunks, gap))
        elif path == b"/v1/models":
            self.transport.write(_response(b"200 OK", b"application/json", MODELS_BODY))
        elif path == b"/v1/bench/headers":
            self.transport.write(_response(b"200 OK", b"text/plain", head))
        else:
            self.transport.write(_response(b"404 Not Found", b"application/json", b"{}"))

    def _events(self, n: int) -> list[bytes]:
        return self.events[:n] if n <= len(self.events) else [_event(i) for i in range(n)]

    async def _paced(self, chunks: int, gap: float) -> None:
        try:
            if self.transport is not None:
                self.transport.write(SSE_HEAD)
            for i, event in enumerate(self._events(chunks)):
                if i:
                    await asyncio.sleep(gap)
                if self.transport is None:
                    return
                self.transport.write(event)
            if self.transport is not None:
                self.transport.write(DONE)
        finally:
            self.busy = False
        self._process()


async def serve(port: int, chunks: int) -> None:
    loop = asyncio.get_running_loop()
    events = [_event(i) for i in range(max(chunks, 128))]
    server = await loop.create_server(
        lambda: Upstream(chunks, events), "127.0.0.1", port, backlog=1024, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=20, help="SSE events before [DONE]")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, args.chunks))
    else:
        uvloop.run(serve(args.port, args.chunks))


if __name__ == "__main__":
    main()
