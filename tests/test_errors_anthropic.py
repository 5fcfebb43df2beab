"""Errors in the Anthropic Messages shape: per request, before, inside and after the route, and
in-band on a stream whose headers are out; chat's shape and bytes unchanged beside them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anthropic
import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.responses import Response
from starlette.testclient import TestClient

from proxy.errors import (
    ERROR_SHAPE,
    ContextTooLarge,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ProxyError,
    Unauthorized,
    UnsupportedMediaType,
    UpstreamTimeout,
    UpstreamUnavailable,
    anthropic_sse_error_frame,
    error_frame_for,
    install_handlers,
    sse_error_frame,
)
from proxy.relay import DisconnectWatch, Relay, RelayOutcome
from proxy.sse import anthropic_stream_end
from tests.fakes.server import serve

# Each error of ours, with the status and Anthropic type a Messages client gets for it.
CASES = [
    (InvalidRequest("bad"), 400, "invalid_request_error"),
    (ContextTooLarge("too long"), 400, "invalid_request_error"),
    (Unauthorized("who"), 401, "authentication_error"),
    (NotFound("none"), 404, "not_found_error"),
    (MethodNotAllowed("no"), 405, "invalid_request_error"),
    (PayloadTooLarge("big"), 413, "request_too_large"),
    (UnsupportedMediaType("xml"), 415, "invalid_request_error"),
    (Overloaded("busy", headers={"retry-after": "1"}), 503, "overloaded_error"),
    (UpstreamUnavailable("down"), 502, "api_error"),
    (UpstreamTimeout("slow"), 504, "timeout_error"),
    (ProxyError("oops"), 500, "api_error"),
]


@pytest.mark.parametrize(("exc", "status", "kind"), CASES)
def test_anthropic_body_of_each_error(exc, status, kind):
    assert exc.status == status
    assert exc.anthropic_body() == {
        "type": "error",
        "error": {"type": kind, "message": exc.message},
    }
    assert exc.body_for("anthropic") == exc.anthropic_body()
    assert exc.body_for("openai") == exc.body() and "error" in exc.body()


def app_raising(exc: Exception) -> FastAPI:
    app = FastAPI()
    install_handlers(app)

    @app.post("/v1/messages")
    async def messages() -> Response:
        raise exc

    @app.post("/v1/messages/count_tokens")
    async def count() -> Response:
        raise exc

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        raise exc

    @app.post("/anthropic/v1/messages")  # a route elsewhere that says its shape itself
    async def flagged(request: Request) -> Response:
        request.scope[ERROR_SHAPE] = "anthropic"
        raise exc

    @app.post("/v1/messages/openai-said")  # a flag wins over the path
    async def said_openai(request: Request) -> Response:
        request.scope[ERROR_SHAPE] = "openai"
        raise exc

    class Body(BaseModel):
        n: int

    @app.post("/v1/messages/validated")
    async def validated(body: Body) -> dict[str, int]:
        return {"n": body.n}

    return app


def client(app: FastAPI) -> TestClient:
    # Buffered answers are all these tests read (streams are tested under uvicorn below).
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(("exc", "status", "kind"), CASES)
def test_handlers_pick_the_shape_per_request(exc, status, kind):
    c = client(app_raising(exc))
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/anthropic/v1/messages"):
        r = c.post(path)
        assert r.status_code == status
        assert r.json() == {"type": "error", "error": {"type": kind, "message": exc.message}}
    if exc.headers:
        assert r.headers["retry-after"] == "1"
    for path in ("/v1/chat/completions", "/v1/messages/openai-said"):
        r = c.post(path)
        assert r.status_code == status and r.content == orjson.dumps(exc.body())


def test_errors_outside_any_route_are_anthropic_shaped_on_messages_paths():
    c = client(app_raising(RuntimeError("boom")))
    r = c.post("/v1/messages")  # unexpected: 500 api_error, no traceback, connection closed
    assert r.status_code == 500 and r.headers["connection"] == "close"
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    assert "boom" not in r.text
    # A flag a route set is seen by the outermost handler too (the scope is one dict).
    r = c.post("/anthropic/v1/messages")
    assert r.status_code == 500 and r.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": "Internal error in shrink-proxy (see its log)."},
    }
    r = c.post("/v1/chat/completions")
    assert r.status_code == 500 and r.json()["error"]["type"] == "api_error"
    assert "param" in r.json()["error"]  # OpenAI's shape there
    r = c.post("/v1/messages/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = c.get("/v1/messages")
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = c.post("/v1/messages/validated", json={"n": "x"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "detail" not in r.json()
    # Not a Messages path: OpenAI's shape, as before.
    r = c.post("/v1/messagesx")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
    r = c.get("/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_the_anthropic_sdk_reads_our_errors_as_its_own_classes():
    app = app_raising(ContextTooLarge("prompt is too long for shrink-proxy"))
    with serve(app) as url:
        sdk = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as info:
            sdk.messages.create(
                model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}]
            )
    assert info.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long for shrink-proxy",
        },
    }


def test_sse_frames():
    exc = UpstreamUnavailable("upstream went away")
    assert sse_error_frame(exc) == b"data: " + orjson.dumps(exc.body()) + b"\n\n"
    assert anthropic_sse_error_frame(exc) == (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
        b'"message":"upstream went away"}}\n\n'
    )
    assert error_frame_for("anthropic") is anthropic_sse_error_frame
    assert error_frame_for("openai") is sse_error_frame


# --- in-band, after headers ----------------------------------------------------------------

START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","content":[],"model":"m","stop_reason":null,'
    b'"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
)
CHAT_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'


def relay_app(events: list[bytes], *, anthropic_frames: bool) -> tuple[FastAPI, list]:
    """An app whose one route relays `events`, then fails as a dying upstream does."""
    outcomes: list[RelayOutcome] = []
    app = FastAPI()

    @app.post("/{path:path}")
    async def relay(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for e in events:
                yield e
                await asyncio.sleep(0)
            raise UpstreamUnavailable("upstream failed mid-stream")

        async def close() -> None:
            pass

        extra = (
            {"error_frame": anthropic_sse_error_frame, "stream_end": anthropic_stream_end}
            if anthropic_frames
            else {}
        )
        return Relay(
            status_code=200,
            headers=[("content-type", "text/event-stream")],
            body=body(),
            close=close,
            event_stream=True,
            watch=DisconnectWatch(request.receive),
            on_done=outcomes.append,
            **extra,
        )

    return app, outcomes


def test_chat_stream_error_bytes_are_unchanged():
    app, outcomes = relay_app([CHAT_EVENT], anthropic_frames=False)
    with serve(app) as url:
        r = httpx.post(url + "/v1/chat/completions")
    exc = UpstreamUnavailable("upstream failed mid-stream")
    assert r.content == CHAT_EVENT + b"data: " + orjson.dumps(exc.body()) + b"\n\n"
    assert outcomes[0].error is not None and not outcomes[0].complete


def test_anthropic_stream_error_is_an_error_event_the_sdk_raises():
    app, outcomes = relay_app([START], anthropic_frames=True)
    with serve(app) as url:
        r = httpx.post(url + "/v1/messages")
        assert r.content == START + (
            b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
            b'"message":"upstream failed mid-stream"}}\n\n'
        )
        with (
            anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as sdk,
            pytest.raises(anthropic.APIStatusError) as info,
            sdk.messages.stream(
                model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}]
            ) as stream,
        ):
            for _ in stream:
                pass
    assert info.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "upstream failed mid-stream"},
    }


def test_anthropic_stream_counts_complete_at_message_stop():
    stop = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    app, outcomes = relay_app([START, stop], anthropic_frames=True)
    with serve(app) as url:
        r = httpx.post(url + "/v1/messages")
    # The upstream still failed after message_stop: the client had the whole answer anyway.
    assert r.content.startswith(START + stop)
    assert outcomes[0].complete
