"""The one flow of a shrunk request, whatever its wire format: parse, plan, summary, open,
retry on overflow, relay. A route names its `Api` (proxy.apis) and calls `serve`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from fastapi import Request
from fastapi.responses import Response

from proxy import wire
from proxy.cuts import cut_point
from proxy.errors import ContextTooLarge, InvalidRequest
from proxy.exchange import ClientGone, Exchange, inspectable
from proxy.inbound import (
    authorize,
    check_content_type,
    header,
    read_body,
    request_id_of,
    state_of,
)
from proxy.pipeline import Plan, Report
from proxy.pipeline.summary import apply_summary
from proxy.pipeline.types import Mode, StageAction
from proxy.retrieval.keep import keep, retrieval_wanted
from proxy.retrieval.rounds import Rounds
from proxy.retrieval.serve import serve_rounds, shape_of
from proxy.shrinker import parse_mode
from proxy.windows import (
    PlanWindow,
    check_truncation,
    overflow_inspectable,
    shrink_to_stated_limit,
)
from proxy.wire.responses import SERVER_HISTORY

if TYPE_CHECKING:
    from proxy.apis import Api
    from proxy.settings import Settings
    from proxy.state import AppState

# What the client said was cut (its middle, marked): the one change it must be told about.
USER_CUT_WARNING = ("x-shrink-warning", "latest-user-cut")


async def serve(request: Request, api: Api) -> Response:
    """A shrunk request of `api`'s format, from the client's bytes to the relayed answer."""
    state = state_of(request)
    ex = Exchange(request, state, request_id_of(request))
    api.mark(request, ex)
    authorize(request, state)
    check_content_type(request)
    raw = await read_body(request, state.settings.max_body_bytes)
    state.heap.note(len(raw))
    raw = api.prepare(raw, state.settings)
    mode, window, body, plan = await plan_request(request, state, raw, ex.request_id, api)
    wanted = retrieval_wanted(request, state.settings)
    unwanted_tool(plan, wanted)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if mode == "compact" and plan.span and plan.marker_index is not None:
        plan = await with_summary(plan, body, request, state, ex, api)
    report = plan.report
    ex.report = report
    # Mode off plans for no window: the budget it would report is only the configured default.
    planned = mode != "off"
    ex.cut = cut_point(body.get(api.fmt.field), report) if planned else None
    ex.fields.update(
        route=api.route,
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
    # Server-held history (Responses' previous_response_id) is the backend's to fit.
    if not report.fits and mode in ("auto", "trim", "compact") and not held_upstream(report):
        ex.log(status=400, error="context_length_exceeded")
        raise ContextTooLarge(
            too_large_message(body, report, window.served), headers=dict(ex.extra_headers)
        )
    messages = plan.messages if plan.changed else api.fmt.conversation(body)
    # The originals behind the refs are kept before anything goes upstream, so every ref the
    # model may ask for is there; the tool goes with the messages that name them.
    if plan.refs:
        await keep(state.retrieval, plan, api.fmt.dialect)
        ex.fields["refs"] = len(plan.refs)
    if plan.retrieval_tool:
        body = api.fmt.with_retrieval_tool(body)
    stream = wire.is_stream(body)
    changed = plan.changed
    content = None
    tap = None
    injected = False
    if stream:
        tap, body, content, injected = api.stream_setup(request, state.settings, raw, body, changed)
        changed = changed or injected
    if content is None:
        content = forwarded(body, messages, api.fmt.field) if changed else raw
    rounds = retrieval_rounds(state, plan, body, content, stream, injected, api)
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
            body = await anyio.to_thread.run_sync(api.fmt.parse, retry_input)
            if injected:
                body = api.with_stream_usage(body)
            retry = await shrink_to_stated_limit(
                state, body, raw_size, mode, resp, error, report, api.fmt
            )
            if retry is None:
                return await ex.answer_buffered(resp, error)
            if mode == "compact" and retry.span and retry.marker_index is not None:
                retry = await with_summary(retry, body, request, state, ex, api)
            if retry.refs:
                await keep(state.retrieval, retry, api.fmt.dialect)
            if unwanted_tool(retry, wanted).retrieval_tool:
                body = api.fmt.with_retrieval_tool(body)
            ex.extra_headers = [*shrink_headers(retry.report), ("x-shrink-retried", "overflow")]
            # The log line and metrics describe the plan that was sent, not the refused one.
            ex.fields.update(
                retried="overflow",
                tokens_after=retry.report.tokens_after,
                budget=retry.report.budget,
                actions=retry.report.actions_header,
            )
            ex.cut = cut_point(body.get(api.fmt.field), retry.report)
            report = ex.report = retry.report
            content = forwarded(body, retry.messages, api.fmt.field)
            rounds = retrieval_rounds(state, retry, body, content, stream, injected, api)
            resp = await ex.open(content, body_changed=True)
    except ClientGone:
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)
    # The model may call the retrieval tool: the loop answers, continues and then replies.
    if rounds is not None and (looped := await serve_rounds(ex, resp, rounds)) is not None:
        return looped
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


async def plan_request(
    request: Request,
    state: AppState,
    raw: bytes,
    request_id: str,
    api: Api,
    full: bool = False,
) -> tuple[Mode, PlanWindow, dict[str, Any], Plan]:
    """Mode, window and plan of a request's bytes: the one path the routes, count_tokens and
    the preview share, so each plans exactly as the real request would be planned."""
    mode = parse_mode(header(request, "x-shrink-mode"), state.settings)
    window = PlanWindow(state, mode)
    body, plan = await state.shrinker.plan_request(
        raw, mode, window, request_id, full=full, fmt=api.fmt
    )
    return mode, window, body, plan


async def with_summary(
    plan: Plan,
    body: dict[str, Any],
    request: Request,
    state: AppState,
    ex: Exchange,
    api: Api,
) -> Plan:
    """The plan with the trim marker replaced by a summary of the dropped span, if one comes in
    time and fits; its report is a new one (the pipeline's is never edited in place).

    When the upstream writes the summaries itself, one the request does not wait for starts
    after the request's own call: a one-slot local server would otherwise run it first."""
    settings = state.settings
    report = dataclasses.replace(
        plan.report,
        actions=dict(plan.report.actions),
        details=list(plan.report.details),
        notes=list(plan.report.notes),
    )
    plan = dataclasses.replace(plan, report=report)
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
        dialect=api.fmt.dialect,
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
    counter = api.fmt.counter(state.tokenizers.for_model(model))
    i = plan.marker_index
    assert i is not None
    messages = apply_summary(
        plan.messages, i, outcome.text, settings.summary_role, api.fmt.dialect, plan.span_ref
    )
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


def unwanted_tool(plan: Plan, wanted: bool) -> Plan:
    """The plan without the retrieval tool when the client turned it off (its room, planned
    either way so that no cut moves, stays unused and is not counted)."""
    if plan.retrieval_tool and not wanted:
        plan.retrieval_tool = False
        plan.report.tokens_after -= plan.tool_tokens
    return plan


def retrieval_rounds(
    state: AppState,
    plan: Plan,
    body: dict[str, Any],
    content: bytes,
    stream: bool,
    injected: bool,
    api: Api,
) -> Rounds | None:
    """The retrieval loop's state for a request the tool went with (None: it did not): the
    refs it may serve, and the room the prompt left in the budget for their pages."""
    if not plan.retrieval_tool:
        return None
    model = body.get("model") if isinstance(body.get("model"), str) else None
    return Rounds(
        content=content,
        issued=frozenset(plan.refs),
        room=plan.report.budget - plan.report.tokens_after,
        counter=api.fmt.counter(state.tokenizers.for_model(model)),
        settings=state.settings,
        stream=stream,
        strip_usage=injected,
        dump=dump_deep,
        single=body.get("n") in (None, 1),
        shape=shape_of(api.fmt.name),
    )


def held_upstream(report: Report) -> bool:
    return SERVER_HISTORY in report.actions


def own_summary_input(settings: Settings, report: Report) -> int:
    """Transcript cap (chars/4 tokens) when the upstream model summarizes: its own window, less
    the summary, with room for its tokenizer counting up to ~1.5x ours (SmolLM2 on llama.cpp:
    1.32x on dev-05)."""
    return max(256, int((report.window - settings.summary_max_tokens) * 0.6))


def forwarded(body: dict[str, Any], messages: list[Any], field: str = "messages") -> bytes:
    """The body with new messages at `field` (its format's, `WireFormat.field`; every other
    field kept, in order), at any depth the wire reads (see `dump_deep`)."""
    return dump_deep({**body, field: messages})


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
