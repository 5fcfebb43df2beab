"""What every format's retrieval stream shares: one client stream over the rounds upstream.

A format's `RoundStream` subclass says what one upstream event becomes for the client
(`event`), what a round cut short still gives out (`unfinished`), and what its continuation
appends (`said`); this base opens the rounds one after another, frames each upstream stream
into events, turns a continuation that failed to open into the relay's in-band error, and hands
the whole to the relay (proxy.relay), which watches for a client that leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import httpx

from proxy.errors import ProxyError
from proxy.exchange import Exchange
from proxy.relay import Relay, RelayOutcome
from proxy.retrieval.rounds import ERROR_BODY_LIMIT, Call, Rounds, upstream_error
from proxy.sse import EventFramer, split_events


class Turn(Protocol):
    """One round of the upstream stream, as each format keeps it."""

    number: int
    done: bool  # its last event came: nothing more is read of it
    continuing: bool  # it ended in retrieval calls: served, and the stream goes on
    ours: list[Call]


class RoundStream:
    error_frame: Callable[[ProxyError], bytes]
    stream_end: Callable[[bytes], bool]

    def __init__(self, ex: Exchange, resp: httpx.Response, rounds: Rounds) -> None:
        self.ex = ex
        self.resp = resp
        self.rounds = rounds
        self.first_usage: dict[str, Any] | None = None  # round one's: the prompt we planned
        self.timings: dict[str, Any] | None = None  # llama.cpp's, of round one

    # --- what a format says ----------------------------------------------------------------

    def turn(self, number: int) -> Any:
        raise NotImplementedError

    def event(self, e: bytes, turn: Any) -> bytes:
        """What the client gets of one upstream event (often the event itself)."""
        raise NotImplementedError

    def unfinished(self, turn: Any) -> tuple[bytes, ProxyError | None]:
        """A round whose stream ended without its last event: what it still gives out (never
        a call of ours), and the error that ends the client's stream, if one must."""
        return b"", None

    def said(self, turn: Any) -> tuple[list[Any], str | None]:
        """(the items a continued round appends before its results, the text it showed)."""
        raise NotImplementedError

    def usage(self, turn: Any) -> Any:
        return getattr(turn, "usage", None)

    def refusal(self, status: int, body: bytes) -> ProxyError:
        """A continuation's error, in the format's shape."""
        return upstream_error(status, body)

    # --- the rounds ------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.resp.aclose()

    async def events(self) -> AsyncIterator[bytes]:
        """Every round's events for the client (whole events)."""
        ex, rounds = self.ex, self.rounds
        try:
            while True:
                turn = self.turn(rounds.served)
                async for out in self.round(turn):
                    yield out
                if not turn.continuing:
                    return
                rounds.note_usage(self.usage(turn))
                said, text = self.said(turn)
                content = await rounds.next_body(ex.state.retrieval, said, turn.ours, text)
                ex.state.metrics.retrieve_rounds.inc()
                await self.resp.aclose()
                self.resp = await ex.send(content, body_changed=True)
                await self.check(self.resp)
        finally:
            await self.resp.aclose()

    async def check(self, resp: httpx.Response) -> None:
        """A continuation that did not open a stream: its error, for the relay's error event."""
        if resp.status_code == 200 and resp.headers.get("content-type", "").startswith(
            "text/event-stream"
        ):
            return
        parts, size = [], 0
        async for chunk in self.ex.state.upstream.iter_body(resp):
            parts.append(chunk)
            size += len(chunk)
            if size > ERROR_BODY_LIMIT:
                break
        if resp.status_code == 200:
            raise ProxyError(
                "The upstream answered a continuation after shrink_retrieve "
                "with something other than an event stream."
            )
        raise self.refusal(resp.status_code, b"".join(parts))

    async def round(self, turn: Any) -> AsyncIterator[bytes]:
        framer = EventFramer()
        body = aiter(self.ex.state.upstream.iter_body(self.resp))
        try:
            async for chunk in body:
                block = framer.feed(chunk)
                if block and (out := b"".join(self.event(e, turn) for e in split_events(block))):
                    yield out
                if turn.done:
                    return
        finally:
            await body.aclose()  # type: ignore[attr-defined]  # an async generator
        rest = framer.flush()
        out = b"".join(self.event(e, turn) for e in split_events(rest)) if rest.strip() else b""
        tail, cut = self.unfinished(turn) if not turn.done else (b"", None)
        if out + tail:
            yield out + tail
        if cut is not None:
            raise cut


def relay_rounds(ex: Exchange, resp: httpx.Response, rs: RoundStream) -> Relay:
    """The client's stream: the first round's status and headers, then every round's events."""
    headers = ex.headers_for(resp, keep_length=False)
    headers.append(("x-accel-buffering", "no"))

    def done(outcome: RelayOutcome) -> None:
        ex.note_usage(rs.first_usage, rs.timings)
        ex.fields.update(rs.rounds.log_fields())
        error = outcome.error.code if outcome.error else None
        ex.log(
            status=resp.status_code,
            bytes=outcome.bytes_sent,
            error=error,
            upstream_error=error,
            client_disconnected=outcome.client_disconnected or None,
        )

    return Relay(
        status_code=resp.status_code,
        headers=headers,
        body=rs.events(),
        close=rs.aclose,
        event_stream=True,
        watch=ex.watch,
        on_done=done,
        error_frame=rs.error_frame,
        stream_end=rs.stream_end,
    )
