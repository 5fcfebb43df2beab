"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

A small `ProxyError` tree carries status, type and code; the exception handlers installed
by `install_handlers` turn it (and Starlette's own 404/405, and anything unexpected) into that
shape, so FastAPI's `{"detail": ...}` never reaches a client and no traceback ever does.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger(__name__)


class ProxyError(Exception):
    status = 500
    type = "api_error"
    code: str | None = None

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


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextTooLarge(InvalidRequest):
    code = "context_length_exceeded"


class Unauthorized(ProxyError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "unknown_url"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class Overloaded(ProxyError):
    """Too many request bodies already wait to be planned: a clear 503, never a queue without
    end (OpenAI answers overload with 503 too)."""

    status = 503
    type = "server_error"
    code = "overloaded"


class UpstreamUnavailable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(exc: ProxyError, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(exc.body()),
        status_code=exc.status,
        media_type="application/json",
        headers=headers,
    )


def sse_error_frame(exc: ProxyError) -> bytes:
    """An in-band error for a stream whose headers are already out (the OpenAI SDK raises it)."""
    return b"data: " + orjson.dumps(exc.body()) + b"\n\n"


def install_handlers(app: FastAPI) -> None:
    async def on_proxy_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProxyError)
        return error_response(exc, headers=exc.headers)

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            err: ProxyError = NotFound(f"Invalid URL ({request.method} {request.url.path})")
        elif exc.status_code == 405:
            err = MethodNotAllowed(f"Method {request.method} not allowed on {request.url.path}")
        else:
            err = ProxyError(str(exc.detail))
            err.status = exc.status_code
        return error_response(err, headers=getattr(exc, "headers", None))

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        return error_response(InvalidRequest(f"Invalid request: {exc}"))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware sends this answer and then raises the exception
        # again, and uvicorn closes the connection when an app raises. `Connection: close` tells
        # the client so: a keep-alive client not told sent its next request into a closed socket
        # (a reset, or an EOF taken for a broken server).
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            ProxyError("Internal error in shrink-proxy (see its log)."),
            headers={"connection": "close"},
        )

    app.add_exception_handler(ProxyError, on_proxy_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
