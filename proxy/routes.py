"""Thin request handlers: read, parse, (shrink), open upstream, relay.

Each handler reads like a table of contents; the work lives in wire, upstream and relay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from proxy import wire
from proxy.cuts import cut_point
from proxy.errors import (
    ContextTooLarge,
    InvalidRequest,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
)
from proxy.exchange import INSPECT_LIMIT, ClientGone, Exchange
from proxy.pipeline import Plan, Report
from proxy.pipeline.summary import apply_summary
from proxy.pipeline.types import Mode, StageAction
from proxy.planner import guess_model
from proxy.shrinker import parse_mode
from proxy.sse import UsageTap
from proxy.upstream import failure_name, new_request_id
from proxy.windows import (
    PlanWindow,
    check_truncation,
    overflow_inspectable,
    shrink_to_stated_limit,
)

if TYPE_CHECKING:
    from proxy.app import AppState
    from proxy.settings import Settings

log = logging.getLogger("proxy.request")
router = APIRouter()

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/")
# What the client said was cut (its middle, marked): the one change it must be told about.
USER_CUT_WARNING = ("x-shrink-warning", "latest-user-cut")


def header(request: Request, name: str, default: str | None = None) -> str | None:
    """A request header by lower-case name (the first, if sent twice).

    Starlette's `request.headers.get` scans every header per lookup and raises and catches a
    KeyError for each absent one; a handler asks for half a dozen, mostly absent.
    """
    headers = request.scope.get("shrink.headers")
    if headers is None:
        headers = request.scope["shrink.headers"] = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(request.scope["headers"])
        }
    return headers.get(name, default)  # type: ignore[no-any-return]


def state_of(request: Request) -> AppState:
    return request.app.state.shrink  # type: ignore[no-any-return]


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, refusing (413) anything over the limit without reading it all."""
    declared = header(request, "content-length")
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


def authorize(request: Request, state: AppState) -> None:
    """With an inbound key configured, only clients that present it get through."""
    expected = state.settings.proxy_api_key
    if expected is None:
        return
    auth = header(request, "authorization") or ""
    presented = (
        auth[7:].strip() if auth[:7].lower() == "bearer " else header(request, "api-key") or ""
    )
    if not hmac.compare_digest(presented.encode(), expected.get_secret_value().encode()):
        raise Unauthorized(
            "Missing or incorrect API key for this proxy: send it as 'Authorization: Bearer KEY' "
            "or 'api-key: KEY'."
        )


def request_id_of(request: Request) -> str:
    return header(request, "x-request-id") or new_request_id()


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
        return JSONResponse({"status": "unavailable", "reason": failure_name(exc)}, status_code=503)
    return JSONResponse({"status": "ready", "upstream_status": r.status_code})


@router.post("/v1/chat/completions")
@router.post("/openai/v1/chat/completions")
@router.post("/openai/deployments/{deployment}/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = state_of(request)
    ex = Exchange(request, state, request_id_of(request))
    authorize(request, state)
    check_content_type(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    state.heap.note(len(raw))
    mode, window, body, plan = await plan_chat(request, state, raw, ex.request_id)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if mode == "compact" and plan.span and plan.marker_index is not None:
        plan = await with_summary(plan, body, request, state, ex)
    report = plan.report
    ex.report = report
    # Mode off plans for no window: the budget it would report is only the configured default.
    planned = mode != "off"
    ex.cut = cut_point(body.get("messages"), report) if planned else None
    ex.fields.update(
        route="chat",
        request_id=ex.request_id,
        model=body.get("model"),
        mode=mode,
        tokens_before=report.tokens_before,
        tokens_after=report.tokens_after,
        actions=report.actions_header,
        shrink_ms=round((time.perf_counter() - ex.started) * 1000, 2),
    )
    if planned:
        ex.fields["budget"] = report.budget
    ex.extra_headers = shrink_headers(report, budget=planned)
    if not report.fits and mode in ("auto", "trim", "compact"):
        ex.log(status=400, error="context_length_exceeded")
        raise ContextTooLarge(
            too_large_message(body, report, window.served), headers=dict(ex.extra_headers)
        )
    messages = plan.messages if plan.changed else body["messages"]
    stream = wire.is_stream(body)
    tap = None
    changed = plan.changed
    content = None
    inject = False
    if stream:
        # Ask for the usage chunk (and hide it) unless the client asked for it itself; Azure's
        # older api-versions reject the unknown field, so its paths are left alone.
        inject = (
            state.settings.stream_usage
            and not wire.wants_stream_usage(body)
            and not request.url.path.startswith("/openai/")
        )
        tap = UsageTap(strip=inject)
        if inject:
            if not changed:
                content = wire.splice_stream_usage(raw, body)  # no re-serialisation
            body = wire.with_stream_usage(body)
            changed = True
    if content is None:
        content = forwarded(body, messages) if changed else raw
    # While the upstream answers, a retry's input is kept as the client's bytes (one block, handed
    # back to the OS when freed), not as the parsed body: thousands of objects per request that
    # 64 waiting requests interleave and fragment the heap with (bench/overhead, peak RSS).
    raw_size = len(raw)
    retry_input = raw if mode != "off" and state.settings.overflow_retry else None
    del raw, body, plan, messages
    if model is not None:
        ex.on_usage = lambda usage: check_truncation(state, ex, model, report.tokens_after, usage)
    try:
        resp = await ex.open(content, body_changed=changed)
        if retry_input is not None and overflow_inspectable(resp):
            error = await ex.read_all(resp)
            assert error is not None  # overflow_inspectable checked the declared length
            # In a thread: a big body's parse would hold the event loop (see proxy.planner).
            body = await anyio.to_thread.run_sync(wire.parse_chat, retry_input)
            if inject:
                body = wire.with_stream_usage(body)
            retry = await shrink_to_stated_limit(state, body, raw_size, mode, resp, error, report)
            if retry is None:
                return await ex.answer_buffered(resp, error)
            if mode == "compact" and retry.span and retry.marker_index is not None:
                retry = await with_summary(retry, body, request, state, ex)
            ex.extra_headers = [*shrink_headers(retry.report), ("x-shrink-retried", "overflow")]
            # The log line and metrics describe the plan that was sent, not the refused one.
            ex.fields.update(
                retried="overflow",
                tokens_after=retry.report.tokens_after,
                budget=retry.report.budget,
                actions=retry.report.actions_header,
            )
            ex.cut = cut_point(body.get("messages"), retry.report)
            report = ex.report = retry.report
            resp = await ex.open(forwarded(body, retry.messages), body_changed=True)
    except ClientGone:
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)
    if not stream and inspectable(resp):
        try:
            data = await ex.read_all(resp)
        except ClientGone:
            ex.log(status=499, client_disconnected=True)
            return Response(status_code=499)
        if data is not None:
            ex.note_json_usage(data)
            return await ex.answer_buffered(resp, data)
    return ex.relay(resp, tap=tap)


async def plan_chat(
    request: Request, state: AppState, raw: bytes, request_id: str, full: bool = False
) -> tuple[Mode, PlanWindow, dict[str, Any], Plan]:
    """Mode, window and plan of a chat request's bytes: the one path the chat routes and the
    preview share, so `/v1/shrink` plans exactly as the real request would be planned."""
    mode = parse_mode(header(request, "x-shrink-mode"), state.settings)
    window = PlanWindow(state, mode)
    body, plan = await state.shrinker.plan_request(raw, mode, window, request_id, full=full)
    return mode, window, body, plan


async def with_summary(
    plan: Plan, body: dict[str, Any], request: Request, state: AppState, ex: Exchange
) -> Plan:
    """Replace the trim marker with a summary of the dropped span, if one comes in time and fits.

    When the upstream writes the summaries itself, one the request does not wait for starts
    after the request's own call: a one-slot local server would otherwise run it first."""
    settings, report = state.settings, plan.report
    model = body.get("model") if isinstance(body.get("model"), str) else None
    ended = asyncio.Event()
    same_server = settings.summary_url is None or (
        settings.summary_url.rstrip("/") == settings.upstream_url.rstrip("/")
    )
    if same_server:
        ex.on_end.append(ended.set)
    outcome = await state.summarizer.summarize(
        plan.span,
        request_model=model,
        # The client's own key may go to the upstream it was meant for, never to another host.
        authorization=header(request, "authorization") if settings.summary_url is None else None,
        max_input_tokens=None if settings.summary_url else own_summary_input(settings, report),
        hold=ended.wait if same_server else None,
    )
    joined = outcome.joined and outcome.source == "model"
    state.metrics.observe_summary("joined" if joined else outcome.source, outcome.latency)
    report.notes.append(
        f"summary: {'joined' if joined else outcome.source}"
        + (f" ({outcome.error})" if outcome.error else "")
    )
    if outcome.source == "deferred":
        report.count("summary_deferred")
        return plan
    if outcome.text is None:
        report.count("summary_fallback")
        return plan
    counter = state.tokenizers.for_model(model)
    i = plan.marker_index
    assert i is not None
    messages = apply_summary(plan.messages, i, outcome.text, settings.summary_role)
    grown = counter.count_message(messages[i]) - counter.count_message(plan.messages[i])
    if report.tokens_after + grown > report.budget:
        report.notes.append("the summary did not fit; the trim marker was kept")
        report.count("summary_fallback")
        return plan
    report.count("summary")
    report.details.append(
        StageAction(
            "summary",
            i,
            f"summary of {len(plan.span)} messages ({outcome.source}, "
            f"{outcome.facts_added} facts appended)",
            0,
            counter.count_message(messages[i]),
        )
    )
    report.tokens_after += grown
    return dataclasses.replace(plan, messages=messages)


def own_summary_input(settings: Settings, report: Report) -> int:
    """Transcript cap (chars/4 tokens) when the upstream model summarizes: its own window, less
    the summary, with room for its tokenizer counting up to ~1.5x ours (SmolLM2 on llama.cpp:
    1.32x on dev-05)."""
    return max(256, int((report.window - settings.summary_max_tokens) * 0.6))


def forwarded(body: dict[str, Any], messages: list[Any]) -> bytes:
    """`wire.dump_with_messages` (every other field kept, in order), at any depth the wire
    reads (see `dump_deep`)."""
    return dump_deep({**body, "messages": messages})


def dump_deep(value: Any) -> bytes:
    """`value` as JSON, also when it is nested past the 254 levels orjson writes: the wire
    accepts 256 in `messages` (the body around them adds one) and reads other fields up to
    orjson's 1,024, so a shrunk request re-serialised can be too deep for it. The standard
    library's encoder writes such a value (ASCII-escaped, which any JSON reader takes) up to
    about 900 levels; past that, the request is refused (400), never a 500."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(value, separators=(",", ":")).encode()
    except (RecursionError, ValueError, TypeError):
        raise InvalidRequest(
            "The request is nested too deeply to be forwarded once shrunk (a field past about "
            "900 levels); flatten its deepest field."
        ) from None


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


@router.post("/v1/shrink")
async def shrink_preview(request: Request) -> Response:
    """What the proxy would send for this chat request, and why; the upstream is not called."""
    state = state_of(request)
    authorize(request, state)
    check_content_type(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    state.heap.note(len(raw))
    *_, plan = await plan_chat(request, state, raw, request_id_of(request), full=True)
    return Response(
        dump_deep({"messages": plan.messages, "report": report_dict(plan.report)}),
        media_type="application/json",
        headers=dict(shrink_headers(plan.report)),
    )


def shrink_headers(report: Report, *, budget: bool = True) -> list[tuple[str, str]]:
    """The x-shrink-* headers; `budget` False when none was planned for (mode off)."""
    headers = [
        ("x-shrink-tokens-before", str(report.tokens_before)),
        ("x-shrink-tokens-after", str(report.tokens_after)),
        ("x-shrink-actions", report.actions_header),
    ]
    if budget:
        headers.append(("x-shrink-budget", str(report.budget)))
    if report.estimate:
        headers.append(("x-shrink-estimate", "bytes/4"))
    if "user_cut" in report.actions:
        headers.append(USER_CUT_WARNING)
    return headers


def too_large_message(body: dict[str, object], report: Report, served: int | None) -> str:
    """The 400's text, quoting the window the backend serves (or the one configured), not the
    smaller one in our units that calibration planned with: that is the figure a user can
    check. `served`: None when no window was discovered or configured for the model."""
    window = served or report.window
    units = ""
    if report.window and window != report.window:
        units = (
            f", counted in shrink-proxy's tokens: the backend counts about "
            f"{window / report.window:.2f}x as many"
        )
    return (
        f"This request needs {report.tokens_after:,} prompt tokens even after shrink-proxy "
        f"dropped old history and cut the largest texts of the newest turn, but model "
        f"{body.get('model')!r} has a prompt budget of {report.budget:,} tokens (its window of "
        f"{window:,} minus the completion reserve and a safety margin{units}). Shorten the "
        "latest message, lower max_tokens, or raise the context window."
    )


def report_dict(report: Report) -> dict[str, object]:
    return {**dataclasses.asdict(report), "actions_header": report.actions_header}


@router.api_route("/v1/{path:path}", methods=ALL_METHODS)
@router.api_route("/openai/{path:path}", methods=ALL_METHODS)
async def passthrough(request: Request) -> Response:
    state = state_of(request)
    ex = Exchange(request, state, request_id_of(request))
    authorize(request, state)
    raw = await read_body(request, state.settings.max_body_bytes)
    ex.fields.update(route="passthrough", request_id=ex.request_id, path=request.url.path)
    # The model the body names (embeddings, completions...); without one, figures are no model's.
    if raw and (model := guess_model(raw)) is not None:
        ex.fields["model"] = model
    try:
        resp = await ex.open(raw, body_changed=False)
    except ClientGone:
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)
    return ex.relay(resp)


def check_content_type(request: Request) -> None:
    ctype = (header(request, "content-type") or "").lower()
    if ctype.startswith(FORM_TYPES):
        raise UnsupportedMediaType(
            f"Content-Type {ctype.split(';')[0]} is not supported; send the request as "
            "JSON with 'Content-Type: application/json'."
        )
