"""Thin request handlers: read, parse, (shrink), open upstream, relay.

Each handler reads like a table of contents; the work lives in wire, upstream and relay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import time
from typing import TYPE_CHECKING

import httpx
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from proxy import wire
from proxy.errors import (
    ContextTooLarge,
    PayloadTooLarge,
    ProxyError,
    Unauthorized,
    UnsupportedMediaType,
)
from proxy.pipeline import Report
from proxy.relay import DisconnectWatch, Relay, RelayOutcome
from proxy.shrinker import parse_mode
from proxy.upstream import new_request_id, request_headers, response_headers

if TYPE_CHECKING:
    from proxy.app import AppState

log = logging.getLogger("proxy.request")
router = APIRouter()

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/")


def state_of(request: Request) -> AppState:
    return request.app.state.shrink  # type: ignore[no-any-return]


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, refusing (413) anything over the limit without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"The request body is {int(declared):,} bytes; the limit is {limit:,}."
        )
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is over the limit of {limit:,} bytes.")
        parts.append(chunk)
    return b"".join(parts)


def raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else request.url.path


def authorize(request: Request, state: AppState) -> None:
    """With an inbound key configured, only clients that present it get through."""
    expected = state.settings.proxy_api_key
    if expected is None:
        return
    auth = request.headers.get("authorization", "")
    presented = (
        auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("api-key", "")
    )
    if not hmac.compare_digest(presented.encode(), expected.get_secret_value().encode()):
        raise Unauthorized(
            "Missing or incorrect API key for this proxy: send it as 'Authorization: Bearer KEY' "
            "or 'api-key: KEY'."
        )


def request_id_of(request: Request) -> str:
    return request.headers.get("x-request-id") or new_request_id()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Ready when the upstream answers at all (any HTTP status means it is reachable)."""
    upstream = state_of(request).upstream
    try:
        r = await upstream.client.get(
            upstream.targets.url("/v1/models", b""),
            timeout=httpx.Timeout(min(5.0, upstream.timeouts.connect), read=5.0),
        )
    except (httpx.HTTPError, OSError) as exc:
        # No URL or detail: /readyz is unauthenticated and must not describe the upstream.
        return JSONResponse(
            {"status": "unavailable", "reason": type(exc).__name__}, status_code=503
        )
    return JSONResponse({"status": "ready", "upstream_status": r.status_code})


@router.post("/v1/chat/completions")
@router.post("/openai/v1/chat/completions")
@router.post("/openai/deployments/{deployment}/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = state_of(request)
    started = time.perf_counter()
    authorize(request, state)
    request_id = request_id_of(request)
    check_content_type(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = wire.parse_chat(raw)
    mode = parse_mode(request.headers.get("x-shrink-mode"), state.settings.mode)
    plan = await state.shrinker.plan(body, len(raw), mode)
    report = plan.report
    fields: dict[str, object] = {
        "request_id": request_id,
        "route": "chat",
        "model": body.get("model"),
        "mode": mode,
        "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after,
        "budget": report.budget,
        "actions": report.actions_header,
        "shrink_ms": round((time.perf_counter() - started) * 1000, 2),
    }
    headers = shrink_headers(report)
    if not report.fits and mode in ("auto", "trim"):
        log_request(fields, started, status=400, error="context_length_exceeded")
        raise ContextTooLarge(too_large_message(body, report), headers=dict(headers))
    content = wire.dump_with_messages(body, plan.messages) if plan.changed else raw
    return await forward(
        request,
        state,
        content,
        request_id,
        fields,
        started,
        body_changed=plan.changed,
        extra_headers=headers,
    )


@router.post("/v1/shrink")
async def shrink_preview(request: Request) -> Response:
    """What the proxy would send for this chat request, and why; the upstream is not called."""
    state = state_of(request)
    authorize(request, state)
    check_content_type(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    body = wire.parse_chat(raw)
    mode = parse_mode(request.headers.get("x-shrink-mode"), state.settings.mode)
    plan = await state.shrinker.plan(body, len(raw), mode)
    return Response(
        orjson.dumps({"messages": plan.messages, "report": report_dict(plan.report)}),
        media_type="application/json",
        headers=dict(shrink_headers(plan.report)),
    )


def shrink_headers(report: Report) -> list[tuple[str, str]]:
    headers = [
        ("x-shrink-tokens-before", str(report.tokens_before)),
        ("x-shrink-tokens-after", str(report.tokens_after)),
        ("x-shrink-actions", report.actions_header),
        ("x-shrink-budget", str(report.budget)),
    ]
    if report.estimate:
        headers.append(("x-shrink-estimate", "bytes/4"))
    return headers


def too_large_message(body: dict[str, object], report: Report) -> str:
    return (
        f"This request needs {report.tokens_after:,} prompt tokens even after shrink-proxy "
        f"dropped old history and cut the largest texts of the newest turn, but model "
        f"{body.get('model')!r} has a prompt budget of {report.budget:,} tokens (window "
        f"{report.window:,} minus the completion reserve and a safety margin). Shorten the "
        "latest message, lower max_tokens, or raise the context window."
    )


def report_dict(report: Report) -> dict[str, object]:
    return {**dataclasses.asdict(report), "actions_header": report.actions_header}


@router.api_route("/v1/{path:path}", methods=ALL_METHODS)
@router.api_route("/openai/{path:path}", methods=ALL_METHODS)
async def passthrough(request: Request) -> Response:
    state = state_of(request)
    started = time.perf_counter()
    authorize(request, state)
    request_id = request_id_of(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    fields: dict[str, object] = {
        "request_id": request_id,
        "route": "passthrough",
        "path": request.url.path,
    }
    return await forward(request, state, raw, request_id, fields, started, body_changed=False)


def check_content_type(request: Request) -> None:
    ctype = request.headers.get("content-type", "").lower()
    if ctype.startswith(FORM_TYPES):
        raise UnsupportedMediaType(
            f"Content-Type {ctype.split(';')[0]} is not supported; send the request as "
            "JSON with 'Content-Type: application/json'."
        )


async def forward(
    request: Request,
    state: AppState,
    content: bytes,
    request_id: str,
    fields: dict[str, object],
    started: float,
    *,
    body_changed: bool,
    extra_headers: list[tuple[str, str]] | None = None,
) -> Response:
    """Open the upstream request and relay its response; log one line when the relay ends."""
    upstream = state.upstream
    url = upstream.targets.url(raw_path(request), request.scope.get("query_string", b""))
    headers = request_headers(
        request.headers.items(),
        api_key=upstream.api_key,
        request_id=request_id,
        body_changed=body_changed,
        drop_client_auth=state.settings.proxy_api_key is not None,
    )
    watch = DisconnectWatch(request.receive)
    try:
        resp = await upstream.open(request.method, url, headers, content or None)
    except asyncio.CancelledError:
        if not watch.absorb():
            raise
        await watch.stop()
        # The client left before the upstream answered; the upstream request is already dropped.
        log_request(fields, started, status=499, client_disconnected=True)
        return Response(status_code=499)
    except ProxyError as exc:
        await watch.stop()
        log_request(fields, started, status=exc.status, error=exc.code)
        raise
    ttfb = time.perf_counter() - started
    out_headers = response_headers(resp)
    if not any(k.lower() == "x-request-id" for k, _ in out_headers):
        out_headers.append(("x-request-id", request_id))
    if extra_headers:
        out_headers.extend(extra_headers)
    event_stream = resp.headers.get("content-type", "").startswith("text/event-stream")
    if event_stream:
        out_headers.append(("x-accel-buffering", "no"))
    elif "content-length" in resp.headers:
        # Raw bytes are relayed unchanged (still encoded, if they were), so the length holds.
        out_headers.append(("content-length", resp.headers["content-length"]))

    def done(outcome: RelayOutcome) -> None:
        log_request(
            fields,
            started,
            status=resp.status_code,
            ttfb_ms=round(ttfb * 1000, 2),
            bytes=outcome.bytes_sent,
            error=outcome.error.code if outcome.error else None,
            client_disconnected=outcome.client_disconnected or None,
        )

    return Relay(
        status_code=resp.status_code,
        headers=out_headers,
        body=upstream.iter_body(resp),
        close=resp.aclose,
        event_stream=event_stream,
        watch=watch,
        on_done=done,
    )


def log_request(fields: dict[str, object], started: float, **more: object) -> None:
    entry = {**fields, **{k: v for k, v in more.items() if v is not None}}
    entry["duration_ms"] = round((time.perf_counter() - started) * 1000, 2)
    log.info("request", extra={"fields": entry})
