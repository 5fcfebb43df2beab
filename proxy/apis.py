"""The APIs the proxy shrinks, each the few things its route does differently from the others:
its wire format, how a stream's usage is asked for and read, and what the raw body needs first.
The flow they share is proxy.flow."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from proxy import wire
from proxy.errors import ERROR_SHAPE, responses_sse_error_frame
from proxy.exchange import Exchange
from proxy.settings import Settings
from proxy.sse import AnthropicUsageTap, ResponsesUsageTap, UsageTap, responses_stream_end
from proxy.wire.anthropic import normalise_billing
from proxy.wire.formats import ANTHROPIC_WIRE, CHAT_WIRE, RESPONSES_WIRE, WireFormat

StreamSetup = tuple[UsageTap, dict[str, Any], bytes | None, bool]


class Api:
    """OpenAI Chat Completions (the default behaviour of every hook)."""

    route = "chat"
    fmt: WireFormat = CHAT_WIRE

    def mark(self, request: Request, ex: Exchange) -> None:
        """Tell the edges (errors, in-band stream errors) which API this request speaks."""

    def prepare(self, raw: bytes, settings: Settings) -> bytes:
        """The client's bytes as the proxy plans and forwards them."""
        return raw

    def stream_setup(
        self, request: Request, settings: Settings, raw: bytes, body: dict[str, Any], changed: bool
    ) -> StreamSetup:
        """(usage tap, body, bytes to send or None, whether the body was changed for it).

        Ask for the usage chunk (and hide it) unless the client asked for it itself; Azure's
        older api-versions reject the unknown field, so its paths are left alone."""
        inject = (
            settings.stream_usage
            and not wire.wants_stream_usage(body)
            and not request.url.path.startswith("/openai/")
        )
        tap = UsageTap(strip=inject)
        content = None
        if inject:
            if not changed:
                content = wire.splice_stream_usage(raw, body)  # no re-serialisation
            body = wire.with_stream_usage(body)
        return tap, body, content, inject

    def with_stream_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        return wire.with_stream_usage(body)


class AnthropicApi(Api):
    """Anthropic Messages: usage comes in `message_start`/`message_delta` unasked."""

    route = "anthropic"
    fmt = ANTHROPIC_WIRE

    def mark(self, request: Request, ex: Exchange) -> None:
        request.scope[ERROR_SHAPE] = "anthropic"

    def prepare(self, raw: bytes, settings: Settings) -> bytes:
        return normalise_billing(raw) if settings.strips_billing_header else raw

    def stream_setup(
        self, request: Request, settings: Settings, raw: bytes, body: dict[str, Any], changed: bool
    ) -> StreamSetup:
        return AnthropicUsageTap(), body, None, False

    def with_stream_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        return body


class ResponsesApi(Api):
    """OpenAI Responses: errors in OpenAI's shape; usage comes in `response.completed`
    unasked; a stream's in-band error is an `error` event, its last event a `response.*` end."""

    route = "responses"
    fmt = RESPONSES_WIRE

    def mark(self, request: Request, ex: Exchange) -> None:
        request.scope[ERROR_SHAPE] = "openai"
        ex.error_frame = responses_sse_error_frame
        ex.stream_end = responses_stream_end

    def stream_setup(
        self, request: Request, settings: Settings, raw: bytes, body: dict[str, Any], changed: bool
    ) -> StreamSetup:
        return ResponsesUsageTap(), body, None, False

    def with_stream_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        return body


CHAT_API = Api()
ANTHROPIC_API = AnthropicApi()
RESPONSES_API = ResponsesApi()
APIS: dict[str, Api] = {"chat": CHAT_API, "anthropic": ANTHROPIC_API, "responses": RESPONSES_API}
