"""Upstreams that misbehave at the socket level, where a Starlette app cannot.

Each is a raw asyncio TCP server on 127.0.0.1 in a background thread, entered as a context
manager that yields a `Fault`: `.url` is the base URL to configure (`http://127.0.0.1:P/v1`), and
the counters say what the proxy did to the upstream side (connections accepted, closed by the
proxy, bytes pushed), so a test can assert that an upstream connection was released, not just
that the client saw an error.

  refused()            nothing listens (a bound, never-listening port: connect gets RST)
  resetting()          accepts, reads the request, resets (SO_LINGER 0 close)
  silent()             accepts, reads the request, never answers
  stalling(n)          SSE headers and n events, then silence with the socket open
  truncating(n)        SSE headers and n chunked events, then a close (FIN, or RST with reset=True)
                       without the last chunk; optionally half an event first
  short_body()         JSON headers with Content-Length 1000, 100 bytes, then close
  slow(response, gap)  a whole, valid response written one byte at a time
  malformed(raw)       `raw` bytes instead of an HTTP response, then close
  closing_idle(delay)  answers one request per connection as if keep-alive, then closes it
                       `delay` seconds later (a keep-alive timeout the client's pool races)
  sse(...)             a well-behaved keep-alive SSE server (n events, a gap, a size): the load
                       for disconnect and backpressure tests, with `sent` counting bytes written
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator

Handler = Callable[["Fault", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nx-fault: yes\r\n\r\n"
)


NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 89\r\n\r\n"
    b'{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":null}}'
)


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (chunked transfer coding)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(i: int, pad: int = 0) -> bytes:
    """One SSE event shaped like an OpenAI chunk, optionally padded to roughly `pad` bytes."""
    text = f"tok{i} " + "x" * max(0, pad - 120)
    return (
        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
        + text.encode()
        + b'"}}]}\n\n'
    )


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head and Content-Length body), or None when the peer closed first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head + (await reader.readexactly(length) if length else b"")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


async def wait_for_close(reader: asyncio.StreamReader) -> None:
    """Until the peer (the proxy) closes its end."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


class Fault:
    """A running fault server and what happened on its side of the wire."""

    def __init__(self, handler: Handler):
        self._handler = handler
        self.url = ""
        self.port = 0
        self.accepted = 0
        self.closed_by_peer = 0
        self.requests: list[bytes] = []
        self.sent = 0
        self.open = 0
        self.peer_closed = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.count("sent", len(data))

    async def until_closed(self, reader: asyncio.StreamReader) -> None:
        await wait_for_close(reader)
        self.count("closed_by_peer")
        self.peer_closed.set()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.count("accepted")
        self.count("open")
        self._writers.add(writer)
        try:
            await self._handler(self, reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            self.count("open", -1)
            writer.close()

    def _run(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0, limit=1 << 20)
        )
        self.port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            loop.run_until_complete(self._shutdown())
            loop.close()

    async def _shutdown(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    @contextlib.contextmanager
    def running(self) -> Iterator[Fault]:
        ready = threading.Event()
        thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault server did not start")
        try:
            yield self
        finally:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(timeout=10)


def _serve(handler: Handler) -> contextlib.AbstractContextManager[Fault]:
    return Fault(handler).running()


@contextlib.contextmanager
def refused() -> Iterator[Fault]:
    """A port that is bound but never listens: every connect is refused, and no one can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    fault = Fault(lambda *a: asyncio.sleep(0))
    fault.port = sock.getsockname()[1]
    fault.url = f"http://127.0.0.1:{fault.port}/v1"
    try:
        yield fault
    finally:
        sock.close()


def resetting(*, read_first: bool = True) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if read_first and (req := await read_request(reader)):
            f.requests.append(req)
        _reset(writer)

    return _serve(handler)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER on, timeout 0)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def silent() -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        await f.until_closed(reader)

    return _serve(handler)


def stalling(events: int = 2) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        await f.write(writer, SSE_HEAD + b"".join(chunk(event(i)) for i in range(events)))
        await f.until_closed(reader)

    return _serve(handler)


def truncating(
    events: int = 2,
    *,
    partial: bytes = b"",
    content_type: bytes = b"text/event-stream",
    reset: bool = False,
) -> contextlib.AbstractContextManager[Fault]:
    """`events` whole chunks, then `partial` (half an event, say), then a close with no end.

    The close is a FIN where the terminating `0\\r\\n\\r\\n` chunk should be, or with `reset`
    an RST (after a pause, so the bytes before it are delivered first).
    """
    head = SSE_HEAD.replace(b"text/event-stream", content_type)

    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        body = b"".join(chunk(event(i)) for i in range(events))
        await f.write(writer, head + body + (chunk(partial) if partial else b""))
        if reset:
            await asyncio.sleep(0.2)
            _reset(writer)

    return _serve(handler)


def short_body(declared: int = 1000, sent: int = 100) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {declared}\r\n\r\n".encode()
        )
        await f.write(writer, head + b'{"id": "' + b"x" * (sent - 8))

    return _serve(handler)


def slow(response: bytes, gap: float) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        for i in range(len(response)):
            await f.write(writer, response[i : i + 1])
            await asyncio.sleep(gap)
        await f.until_closed(reader)

    return _serve(handler)


def malformed(raw: bytes) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
        await f.write(writer, raw)

    return _serve(handler)


CHAT_OK = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 142\r\n\r\n"
    b'{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}'
)


def closing_idle(delay: float) -> contextlib.AbstractContextManager[Fault]:
    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if req := await read_request(reader):
            f.requests.append(req)
            await f.write(writer, CHAT_OK)
        await asyncio.sleep(delay)  # whatever arrives meanwhile is never read or answered

    return _serve(handler)


def sse(
    *,
    events: int = 3,
    gap: float = 0.0,
    size: int = 0,
    head_delay: float = 0.0,
) -> contextlib.AbstractContextManager[Fault]:
    """A correct keep-alive SSE upstream; `events` of ~`size` bytes, `gap` seconds apart."""

    async def handler(f: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        while req := await read_request(reader):
            if len(f.requests) < 100:
                f.requests.append(req)
            if not req.startswith(b"POST "):
                # Only completions stream; a probe (GET /v1/models, /props...) finds nothing.
                await f.write(writer, NOT_FOUND)
                continue
            if head_delay:
                await asyncio.sleep(head_delay)
            await f.write(writer, SSE_HEAD)
            for i in range(events):
                await f.write(writer, chunk(event(i, size)))
                if gap:
                    await asyncio.sleep(gap)
            await f.write(writer, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        f.count("closed_by_peer")
        f.peer_closed.set()

    return _serve(handler)
