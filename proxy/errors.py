"""Errors in the client's wire shape: OpenAI's `{"error": {"message", "type", "param", "code"}}`,
or, on the Anthropic Messages API, `{"type": "error", "error": {"type", "message"}}`.

A small `ProxyError` tree carries status, type and code (and the Anthropic type beside them);
the exception handlers installed by `install_handlers` turn it (and Starlette's own 404/405,
and anything unexpected) into the shape of the request's API, so FastAPI's `{"detail": ...}`
never reaches a client and no traceback ever does. The shape is chosen per request: a route sets
`request.scope[ERROR_SHAPE]`; without it, paths under `/v1/messages` get Anthropic's (so a 404,
405, validation error or unexpected 500 there is shaped as an Anthropic client expects).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger(__name__)

Shape = Literal["openai", "anthropic"]
ERROR_SHAPE = "shrink.error_shape"  # the request scope key a route sets to its API's shape
ANTHROPIC_PATH = "/v1/messages"

# Anthropic's error types by status (docs "Errors"; the SDK's `ErrorType`), for errors that do
# not name their own; anything else is an `api_error`.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class ProxyError(Exception):
    status = 500
    type = "api_error"
    code: str | None = None
    # The `error.type` of the Anthropic shape; None: from the status (ANTHROPIC_TYPES).
    anthropic_type: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)

    def anthropic_body(self) -> dict[str, Any]:
        kind = self.anthropic_type or ANTHROPIC_TYPES.get(self.status, "api_error")
        return anthropic_error_body(self.message, kind)

    def body_for(self, shape: Shape) -> dict[str, Any]:
        return self.anthropic_body() if shape == "anthropic" else self.body()


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextTooLarge(InvalidRequest):
    code = "context_length_exceeded"


class Unauthorized(ProxyError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    anthropic_type = "authentication_error"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "unknown_url"
    anthropic_type = "not_found_error"


class RefGone(NotFound):
    """A retrieval hash this proxy does not hold (never issued, expired or evicted)."""

    code = "hash_not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"
    anthropic_type = "invalid_request_error"  # Anthropic has no type of its own for 405


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"
    anthropic_type = "request_too_large"


class UnsupportedMediaType(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"
    anthropic_type = "invalid_request_error"


class Overloaded(ProxyError):
    """Too many request bodies already wait to be planned: a clear 503, never a queue without
    end (OpenAI answers overload with 503 too).

    On the Anthropic API too it stays 503 (with its Retry-After), typed `overloaded_error`:
    the Anthropic SDKs retry every status >= 500 alike and honour Retry-After (<= 60 s) for
    503 as for 529, while Claude Code counts 529s as the model being overloaded (it may switch
    to its fallback model after a few): this is the proxy's own queue, not the model's."""

    status = 503
    type = "server_error"
    code = "overloaded"
    anthropic_type = "overloaded_error"


class UpstreamUnavailable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"
    anthropic_type = "api_error"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"
    anthropic_type = "timeout_error"  # Anthropic's own 504 type (the SDK's GatewayTimeoutError)


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error_body(message: str, type_: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def error_shape(request: Request) -> Shape:
    """The error shape of a request: what its route said, else Anthropic's under /v1/messages."""
    said = request.scope.get(ERROR_SHAPE)
    if said in ("openai", "anthropic"):
        return said  # type: ignore[no-any-return]
    path = request.url.path
    if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
        return "anthropic"
    return "openai"


def error_response(
    exc: ProxyError, headers: dict[str, str] | None = None, shape: Shape = "openai"
) -> Response:
    return Response(
        orjson.dumps(exc.body_for(shape)),
        status_code=exc.status,
        media_type="application/json",
        headers=headers,
    )


def sse_error_frame(exc: ProxyError) -> bytes:
    """An in-band error for a stream whose headers are already out (the OpenAI SDK raises it)."""
    return b"data: " + orjson.dumps(exc.body()) + b"\n\n"


def anthropic_sse_error_frame(exc: ProxyError) -> bytes:
    """The same for an Anthropic stream: an `error` event, as Anthropic's API sends one (the
    SDK raises it as an APIStatusError from the stream)."""
    return b"event: error\ndata: " + orjson.dumps(exc.anthropic_body()) + b"\n\n"


def responses_sse_error_frame(exc: ProxyError) -> bytes:
    """The same for a Responses stream: an `error` event with the error's fields at the top,
    as OpenAI sends one (Codex reads `type`), and under `error` (the SDK raises on that)."""
    err = exc.body()["error"]
    return b"event: error\ndata: " + orjson.dumps({**err, "type": "error", "error": err}) + b"\n\n"


def error_frame_for(shape: Shape) -> Callable[[ProxyError], bytes]:
    return anthropic_sse_error_frame if shape == "anthropic" else sse_error_frame


def install_handlers(app: FastAPI) -> None:
    async def on_proxy_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProxyError)
        return error_response(exc, headers=exc.headers, shape=error_shape(request))

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            err: ProxyError = NotFound(f"Invalid URL ({request.method} {request.url.path})")
        elif exc.status_code == 405:
            err = MethodNotAllowed(f"Method {request.method} not allowed on {request.url.path}")
        else:
            err = ProxyError(str(exc.detail))
            err.status = exc.status_code
        return error_response(
            err, headers=getattr(exc, "headers", None), shape=error_shape(request)
        )

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        return error_response(InvalidRequest(f"Invalid request: {exc}"), shape=error_shape(request))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware sends this answer and then raises the exception
        # again, and uvicorn closes the connection when an app raises. `Connection: close` tells
        # the client so: a keep-alive client not told sent its next request into a closed socket
        # (a reset, or an EOF taken for a broken server).
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            ProxyError("Internal error in shrink-proxy (see its log)."),
            headers={"connection": "close"},
            shape=error_shape(request),
        )

    app.add_exception_handler(ProxyError, on_proxy_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
