"""Relaying an upstream response to the client: status first, then raw bytes as they arrive.

Starlette's StreamingResponse (ASGI spec 2.4) notices a client that went away only when its next
`send` fails, so a silent upstream would be held open for minutes. `Relay` watches `receive()` for
`http.disconnect` and cancels the copy at once; the upstream response is closed in `finally`.
After headers are sent, an upstream failure becomes an in-band SSE error frame (for event streams)
or an aborted connection (for anything else: a body that ends cleanly would pass for complete).
Event streams are relayed whole events at a time (a partial event is held until its blank line,
which is the earliest a client could use it anyway), so that the error frame never lands in the
middle of an event where no client could parse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError, sse_error_frame
from proxy.sse import EventFramer, StreamTap, chat_stream_end

log = logging.getLogger(__name__)

Done = Callable[["RelayOutcome"], Awaitable[None] | None]
# The in-band error event for a stream whose headers are out, in the stream's own wire format.
ErrorFrame = Callable[[ProxyError], bytes]
# Whether a block of whole events ends with the stream's last event (the client has it all).
StreamEnd = Callable[[bytes], bool]


class RelayOutcome:
    """How a relay ended, for the request log and metrics."""

    __slots__ = ("bytes_sent", "chunks", "client_disconnected", "complete", "error")

    def __init__(self) -> None:
        self.bytes_sent = 0
        self.chunks = 0
        self.client_disconnected = False
        # The client had the whole answer (the upstream's body ended, or the stream's last
        # event, `data: [DONE]` or `message_stop`, went out). An SDK closes its connection right
        # after it, often before the upstream's own end: a finished request, not a client that
        # left.
        self.complete = False
        self.error: ProxyError | None = None


class DisconnectWatch:
    """Cancels the handler's task the moment the client disconnects.

    Started before the upstream request opens (a client may leave while the upstream is still
    thinking) and handed to the `Relay`, which keeps it running while bytes flow.
    """

    def __init__(self, receive: Receive):
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.disconnected = False
        self._watcher = asyncio.create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self.task.cancel()
                return

    def absorb(self) -> bool:
        """Inside `except CancelledError`: True (and the cancel undone) if we caused it."""
        if self.disconnected:
            self.task.uncancel()
            return True
        return False

    async def stop(self) -> None:
        self._watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watcher


class Relay(Response):
    def __init__(
        self,
        *,
        status_code: int,
        headers: list[tuple[str, str]],
        body: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        event_stream: bool,
        watch: DisconnectWatch,
        on_done: Done | None = None,
        tap: StreamTap | None = None,
        error_frame: ErrorFrame = sse_error_frame,
        stream_end: StreamEnd = chat_stream_end,
    ):
        self.status_code = status_code
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        self.body_iterator = body
        self._close = close
        self._event_stream = event_stream
        self._watch = watch
        self._on_done = on_done
        self._tap = tap  # sees each block of whole events (event streams only)
        self._error_frame = error_frame
        self._stream_end = stream_end
        self.background = None

    @staticmethod
    async def _send_body(send: Send, chunk: bytes, outcome: RelayOutcome) -> None:
        outcome.bytes_sent += len(chunk)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = RelayOutcome()
        watch = self._watch
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            framer = EventFramer()
            tap = self._tap
            try:
                async for chunk in self.body_iterator:
                    outcome.chunks += 1
                    if self._event_stream:
                        chunk = framer.feed(chunk)
                        if tap is not None and chunk:
                            chunk = tap.inspect(chunk)
                        if not chunk:
                            continue
                    await self._send_body(send, chunk, outcome)
                    if self._event_stream and self._stream_end(chunk):
                        outcome.complete = True
                if rest := framer.flush():
                    # The upstream's own last bytes, framed or not: relayed as they are.
                    await self._send_body(send, rest, outcome)
                outcome.complete = True
            except ProxyError as exc:
                outcome.error = exc
                log.warning("upstream failed mid-response: %s", exc.message)
                if not self._event_stream:
                    # Returning without the final frame makes the server drop the connection,
                    # so the client sees a truncated response instead of a short "complete" one.
                    return
                # A held partial event is dropped; one already passed on (over the size cap)
                # is closed first so that the error is an event of its own.
                frame = (b"\n\n" if framer.in_event else b"") + self._error_frame(exc)
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            outcome.client_disconnected = not outcome.complete
        except OSError:
            outcome.client_disconnected = not outcome.complete
        finally:
            await watch.stop()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                # Release the upstream generator now, not whenever the garbage collector runs.
                await aclose()
            await self._close()
            if self._on_done is not None:
                result = self._on_done(outcome)
                if result is not None:
                    await result
