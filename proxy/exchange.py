"""One client request's exchange with the upstream: open, maybe inspect, relay, log once.

The status is decided before the first byte reaches the client. Chat answers that are not
streams are read whole (they arrive whole anyway) so their usage can be checked and a warning
header set; streams are relayed as they arrive, through a usage tap when the proxy asked for the
usage chunk itself. A client that leaves at any point drops the upstream request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import Request
from fastapi.responses import Response

from proxy.errors import ProxyError, error_frame_for, error_shape
from proxy.pipeline import Report
from proxy.relay import DisconnectWatch, ErrorFrame, Relay, RelayOutcome, StreamEnd
from proxy.sse import (
    StreamTap,
    cache_fields,
    json_report,
    prefix_reuse,
    prompt_tokens,
    stream_end_for,
)
from proxy.upstream import request_headers, response_headers

if TYPE_CHECKING:
    from proxy.state import AppState

log = logging.getLogger("proxy.request")

CACHE_FIELDS = ("cached_tokens", "cache_n", "prompt_n")

# Non-stream chat answers up to this size are read whole for inspection; larger ones stream.
INSPECT_LIMIT = 8 * 1024 * 1024


class ClientGone(Exception):
    """The client disconnected before the response started."""


@dataclass
class Exchange:
    request: Request
    state: AppState
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    fields: dict[str, Any] = field(default_factory=dict)
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    # Called with the usage once known (JSON body read, or stream ended): truncation check.
    on_usage: Callable[[dict[str, Any] | None], None] | None = None
    ttfb: float | None = None
    report: Report | None = None  # for metrics: what the pipeline did
    # (conversation root digest, where the trim cut is) for counting cut moves; see routes.
    cut: tuple[bytes, int] | None = None
    # Called once the exchange is over (its log line written): a deferred summary for the same
    # one-slot upstream starts then, not ahead of this request.
    on_end: list[Callable[[], None]] = field(default_factory=list)
    # The stream's wire format, for a relayed event stream: the in-band error event sent after
    # headers, and how its last event looks. A route may set them (`errors.error_frame_for`,
    # `sse.anthropic_stream_end`); unset, they follow the request's error shape
    # (`errors.error_shape`: chat's, or Anthropic's on /v1/messages, passthrough included).
    error_frame: ErrorFrame | None = None
    stream_end: StreamEnd | None = None
    _watch: DisconnectWatch | None = None

    # --- opening -------------------------------------------------------------------------------

    async def open(self, content: bytes, *, body_changed: bool) -> httpx.Response:
        """Send the request; return once headers are in. Raises ProxyError or ClientGone."""
        if self._watch is None:
            self._watch = DisconnectWatch(self.request.receive)
        async with self._guard():
            resp = await self.send(content, body_changed=body_changed)
        self.ttfb = time.perf_counter() - self.started
        return resp

    async def send(self, content: bytes, *, body_changed: bool) -> httpx.Response:
        """`open` without its guard, for a response already under way (a stream the retrieval
        loop continues): there a failure goes in-band and a client that leaves is the relay's
        to notice, so neither is logged or mapped here. Raises ProxyError."""
        upstream = self.state.upstream
        request = self.request
        url = upstream.targets.url(raw_path(request), request.scope.get("query_string", b""))
        headers = request_headers(
            request.headers.items(),
            api_key=upstream.api_key,
            request_id=self.request_id,
            body_changed=body_changed,
            drop_client_auth=self.state.settings.proxy_api_key is not None,
        )
        return await upstream.open(request.method, url, headers, content or None)

    def guarded(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The guard of `open` and `read_all` (a client that left becomes ClientGone), for
        other awaits before the response starts: the retrieval loop's store reads."""
        return self._guard()

    @property
    def watch(self) -> DisconnectWatch:
        assert self._watch is not None, "opened first"
        return self._watch

    async def read_all(self, resp: httpx.Response, limit: int = INSPECT_LIMIT) -> bytes | None:
        """The whole body (for error bodies and chat JSON), or None if it is over `limit`.

        When None is returned the bytes read so far are lost, so callers only use this on
        responses they know to be small (declared length) or are willing to re-request.
        """
        assert self._watch is not None
        parts: list[bytes] = []
        size = 0
        try:
            async with self._guard():
                async for chunk in self.state.upstream.iter_body(resp):
                    parts.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        return None
        finally:
            await resp.aclose()
        return b"".join(parts)

    @contextlib.asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        """Before the response starts: a client that left becomes ClientGone, and an upstream
        failure is logged once and raised for the handlers to answer (502/504)."""
        assert self._watch is not None
        try:
            yield
        except asyncio.CancelledError:
            if not self._watch.absorb():
                raise
            await self._watch.stop()
            raise ClientGone from None
        except ProxyError as exc:
            await self._watch.stop()
            self.log(status=exc.status, error=exc.code, upstream_error=exc.code)
            raise
        except BaseException:
            await self._watch.stop()  # unforeseen: the handlers answer 500; stop watching first
            raise

    # --- answering -----------------------------------------------------------------------------

    def headers_for(self, resp: httpx.Response, *, keep_length: bool) -> list[tuple[str, str]]:
        out = response_headers(resp)
        if not any(k.lower() == "x-request-id" for k, _ in out):
            out.append(("x-request-id", self.request_id))
        out.extend(self.extra_headers)
        if keep_length and "content-length" in resp.headers:
            # Raw bytes are relayed unchanged (still encoded, if they were), so the length holds.
            out.append(("content-length", resp.headers["content-length"]))
        return out

    async def answer_buffered(self, resp: httpx.Response, body: bytes) -> Response:
        """Send a body read whole (usage already inspected by the caller)."""
        assert self._watch is not None
        await self._watch.stop()
        headers = [(k, v) for k, v in self.headers_for(resp, keep_length=False)]
        self.log(
            status=resp.status_code,
            bytes=len(body),
            upstream_error=str(resp.status_code) if resp.status_code >= 400 else None,
        )
        response = Response(content=body, status_code=resp.status_code)
        response.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers
        ] + [(b"content-length", str(len(body)).encode())]
        return response

    def relay(self, resp: httpx.Response, *, tap: StreamTap | None = None) -> Response:
        """Stream the upstream response to the client as it arrives."""
        assert self._watch is not None
        event_stream = resp.headers.get("content-type", "").startswith("text/event-stream")
        headers = self.headers_for(resp, keep_length=not event_stream)
        if event_stream:
            headers.append(("x-accel-buffering", "no"))
        body = self.state.upstream.iter_body(resp)
        shape = error_shape(self.request)

        def done(outcome: RelayOutcome) -> None:
            if tap is not None:
                self.note_usage(tap.usage, tap.timings)
            error = outcome.error.code if outcome.error else None
            self.log(
                status=resp.status_code,
                bytes=outcome.bytes_sent,
                error=error,
                upstream_error=error
                or (str(resp.status_code) if resp.status_code >= 400 else None),
                client_disconnected=outcome.client_disconnected or None,
            )

        return Relay(
            status_code=resp.status_code,
            headers=headers,
            body=body,
            close=resp.aclose,
            event_stream=event_stream,
            watch=self._watch,
            on_done=done,
            tap=tap if event_stream else None,
            error_frame=self.error_frame or error_frame_for(shape),
            stream_end=self.stream_end or stream_end_for(shape),
        )

    def note_usage(
        self, usage: dict[str, Any] | None, timings: dict[str, Any] | None = None
    ) -> None:
        self.usage = usage
        n = prompt_tokens(usage)
        if n is not None:
            self.fields["upstream_prompt_tokens"] = n
        self.fields.update(cache_fields(usage, timings))
        if self.on_usage is not None:
            self.on_usage(usage)

    def note_json_usage(self, body: bytes) -> None:
        """The usage of a body read whole: a chat completion or an Anthropic message."""
        self.note_usage(*json_report(body))

    # --- logging -------------------------------------------------------------------------------

    def log(self, **more: object) -> None:
        entry = {**self.fields, **{k: v for k, v in more.items() if v is not None}}
        if self.ttfb is not None:
            entry["ttfb_ms"] = round(self.ttfb * 1000, 2)
        duration = time.perf_counter() - self.started
        entry["duration_ms"] = round(duration * 1000, 2)
        log.info("request", extra={"fields": entry})
        self.observe(entry, duration)
        for ended in self.on_end:
            ended()

    def observe(self, entry: dict[str, Any], duration: float) -> None:
        """The same facts as the log line, for /metrics and the dashboard."""

        def text(key: str) -> str | None:
            value = entry.get(key)
            return value if isinstance(value, str) else None

        shrink_ms = entry.get("shrink_ms")
        upstream_tokens = entry.get("upstream_prompt_tokens")
        if not isinstance(upstream_tokens, int):
            upstream_tokens = None
        cache = {k: v for k in CACHE_FIELDS if isinstance(v := entry.get(k), int)}
        self.state.metrics.observe_request(
            text("route") or "other",
            status=int(entry["status"]),
            duration_s=duration,
            model=entry.get("model"),
            ttfb_s=self.ttfb,
            shrink_s=shrink_ms / 1000 if isinstance(shrink_ms, int | float) else None,
            report=self.report,
            # Tokens count as sent (and saved) only once the upstream has answered.
            sent=self.ttfb is not None,
            request_id=self.request_id,
            mode=text("mode"),
            error=text("error"),
            upstream_error=text("upstream_error"),
            client_disconnected=bool(entry.get("client_disconnected")),
            upstream_prompt_tokens=upstream_tokens,
            prefix_reuse=prefix_reuse(cache, upstream_tokens),
            path=text("path"),
            cut=self.cut,
        )


def inspectable(resp: httpx.Response) -> bool:
    """A complete JSON answer of known, modest size: read it whole to learn its usage."""
    length = resp.headers.get("content-length")
    return (
        resp.status_code == 200
        and resp.headers.get("content-type", "").startswith("application/json")
        and "content-encoding" not in resp.headers
        and length is not None
        and length.isdigit()
        and int(length) <= INSPECT_LIMIT
    )


def raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else request.url.path
