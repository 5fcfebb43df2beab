"""Thin request handlers: each names its API and hands the request to the shared flow.

The work lives in proxy.flow (parse, plan, summary, open, retry, relay), the wire formats in
proxy.wire and proxy.apis, the edges in upstream, relay and exchange.
"""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from proxy.apis import ANTHROPIC_API, CHAT_API, RESPONSES_API, Api
from proxy.exchange import ClientGone, Exchange
from proxy.flow import (
    dump_deep,
    forwarded,
    plan_request,
    report_dict,
    serve,
    shrink_headers,
    unwanted_tool,
)
from proxy.inbound import (
    authorize,
    check_content_type,
    header,
    read_body,
    request_id_of,
    state_of,
)
from proxy.planner import guess_model
from proxy.retrieval.http import retrieve
from proxy.retrieval.keep import retrieval_wanted
from proxy.transport import failure_name

__all__ = ["authorize", "router", "state_of"]

router = APIRouter()

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


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
    return await serve(request, CHAT_API)


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    return await serve(request, ANTHROPIC_API)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The prompt's size as the proxy would forward it (shrunk), so Claude Code's auto-compact
    and `/context` see what the model will see: the upstream's own count of the shrunk request
    where it counts (Anthropic, llama.cpp, vLLM), else ours scaled by the learnt calibration."""
    return await counted(request, ANTHROPIC_API, {})


@router.post("/v1/responses")
async def responses(request: Request) -> Response:
    return await serve(request, RESPONSES_API)


@router.post("/v1/responses/input_tokens")
async def input_tokens(request: Request) -> Response:
    """OpenAI's input-token count of a Responses request, as /v1/messages/count_tokens."""
    return await counted(request, RESPONSES_API, {"object": "response.input_tokens"})


async def counted(request: Request, api: Api, shape: dict[str, str]) -> Response:
    """A count-tokens route of `api`: the request as it would be forwarded, counted upstream
    when the upstream counts, else by us; `shape`: the answer's other fields."""
    state = state_of(request)
    ex = Exchange(request, state, request_id_of(request))
    api.mark(request, ex)
    authorize(request, state)
    check_content_type(request)
    raw = api.prepare(await read_body(request, state.settings.max_body_bytes), state.settings)
    state.heap.note(len(raw))
    *_, body, plan = await plan_request(request, state, raw, ex.request_id, api)
    # The retrieval tool too, when the real request would carry it: the count is of that.
    if unwanted_tool(plan, retrieval_wanted(request, state.settings)).retrieval_tool:
        body = api.fmt.with_retrieval_tool(body)
    ex.fields.update(route="count_tokens", request_id=ex.request_id, model=body.get("model"))
    ex.extra_headers = shrink_headers(plan.report)
    content = forwarded(body, plan.messages, api.fmt.field) if plan.changed else raw
    try:
        resp = await ex.open(content, body_changed=plan.changed)
        if resp.status_code not in (404, 405, 501):
            return ex.relay(resp)
        await resp.aclose()
    except ClientGone:
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)
    model = body.get("model")
    ratio = (state.calibration.ratio(model) if isinstance(model, str) else None) or 1.0
    ex.log(status=200, counted="proxy")
    return JSONResponse(
        {**shape, "input_tokens": round(plan.report.tokens_after * ratio)},
        headers=dict(ex.extra_headers),
    )


@router.post("/v1/shrink")
async def shrink_preview(request: Request) -> Response:
    """What the proxy would send for this request, and why; the upstream is not called. A
    Messages body is planned as Anthropic's when asked (`?api=anthropic`) or when the request
    carries `anthropic-version`, a Responses body when asked (`?api=responses`); else as a chat
    request. The answer holds the planned list under its format's name (`input` for Responses)."""
    state = state_of(request)
    authorize(request, state)
    check_content_type(request)
    api = preview_api(request)
    raw = api.prepare(await read_body(request, state.settings.max_body_bytes), state.settings)
    state.heap.note(len(raw))
    *_, plan = await plan_request(request, state, raw, request_id_of(request), api, full=True)
    return Response(
        dump_deep({api.fmt.field: plan.messages, "report": report_dict(plan.report)}),
        media_type="application/json",
        headers=dict(shrink_headers(plan.report)),
    )


def preview_api(request: Request) -> Api:
    asked = request.query_params.get("api")
    if asked == "anthropic" or (asked is None and header(request, "anthropic-version")):
        return ANTHROPIC_API
    if asked == "responses":
        return RESPONSES_API
    return CHAT_API


@router.get("/v1/retrieve/{ref}")
async def retrieve_ref(request: Request, ref: str) -> Response:
    return await retrieve(request, ref)


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
