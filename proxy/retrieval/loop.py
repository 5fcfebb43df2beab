"""The in-flight retrieval loop of a Chat Completions request: when the model calls
`shrink_retrieve`, the proxy answers the call from the store and continues the generation
upstream (the same body, plus the assistant message that made the calls and one `tool` message
per call), at most `retrieve_rounds` times. The client sees one completion and never the call.

The flow (proxy.flow) calls `serve_rounds` once the upstream was opened and the overflow retry
handled, only when the tool went with the request. This module holds the non-stream loop,
proxy.retrieval.stream continues a stream, proxy.retrieval.rounds is what both share. Whether
a request wants the tool at all is `retrieval_wanted` (proxy.retrieval.keep: the one place that
reads `x-shrink-retrieve`).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from fastapi.responses import Response

from proxy.exchange import ClientGone, Exchange, inspectable
from proxy.retrieval.keep import retrieval_wanted
from proxy.retrieval.rounds import (
    ERROR_BODY_LIMIT,
    Rounds,
    chat_said,
    split_calls,
    upstream_error,
)
from proxy.retrieval.stream import relay_rounds

__all__ = ["Rounds", "retrieval_wanted", "serve_rounds"]


def without_ours(choice: dict[str, Any], rounds: Rounds) -> dict[str, Any]:
    """A final choice with the retrieval calls taken out: only the client's calls stay, and a
    choice left with none finishes as `stop` (its text is the answer)."""
    message = choice.get("message")
    ours, theirs = split_calls(message)
    if not ours or not isinstance(message, dict):
        return choice
    rounds.limited = True
    message = {k: v for k, v in message.items() if k != "tool_calls"}
    if theirs:
        message["tool_calls"] = theirs
    elif choice.get("finish_reason") == "tool_calls":
        choice = {**choice, "finish_reason": "stop"}
    return {**choice, "message": message}


def finished(obj: dict[str, Any], first: dict[str, Any], rounds: Rounds) -> dict[str, Any]:
    """The final round's completion as the client gets it: one completion (the first round's
    id, created, model), the text of every round, usage summed, no retrieval call left."""
    same: dict[str, Any] = {k: first[k] for k in ("id", "created", "model") if k in first}
    out = {**obj, **same}
    choices = obj.get("choices")
    if isinstance(choices, list):
        out["choices"] = [without_ours(c, rounds) if isinstance(c, dict) else c for c in choices]
        if rounds.texts and out["choices"] and isinstance(out["choices"][0], dict):
            head = out["choices"][0]
            message = head.get("message")
            if isinstance(message, dict):
                text = "".join([*rounds.texts, message.get("content") or ""])
                out["choices"][0] = {**head, "message": {**message, "content": text}}
    if isinstance(obj.get("usage"), dict):
        out["usage"] = rounds.total_usage(obj["usage"])
    return out


async def serve_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response | None:
    """The client's answer of a request that carries the retrieval tool; None when this
    response is not one the loop can continue (an error, a stream that is not an event stream,
    a JSON answer too large to inspect): the flow relays it as it would any other."""
    if resp.status_code != 200:
        return None
    if rounds.stream:
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            return None
        return relay_rounds(ex, resp, rounds)
    if not inspectable(resp):
        return None
    try:
        return await complete(ex, resp, rounds)
    except ClientGone:
        ex.fields.update(rounds.log_fields())
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)


async def complete(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response:
    """The non-stream loop: read each round whole, serve its retrieval calls, continue; the
    last round's answer (or a continuation's error, relayed) goes to the client."""
    first: dict[str, Any] | None = None
    while True:
        data = await ex.read_all(resp)
        assert data is not None  # inspectable: its declared length is under the limit
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            return await reply(ex, resp, data, rounds)  # not a completion: the backend's own
        if first is None:
            first = obj
            ex.note_json_usage(data)  # the first round's prompt is the one our count planned
        choices = obj.get("choices")
        head = choices[0] if isinstance(choices, list) and choices else None
        message = head.get("message") if isinstance(head, dict) else None
        ours, _ = split_calls(message)
        if not ours or not rounds.can_continue:
            done = finished(obj, first, rounds)
            return await reply(ex, resp, orjson.dumps(done), rounds)
        assert isinstance(message, dict)
        rounds.note_usage(obj.get("usage"))
        text = message.get("content") if isinstance(message.get("content"), str) else None
        async with ex.guarded():
            content = await rounds.next_body(
                ex.state.retrieval, [chat_said(text, ours)], ours, text
            )
        ex.state.metrics.retrieve_rounds.inc()
        ttfb = ex.ttfb  # the client waited for the first round's headers, not this one's
        resp = await ex.open(content, body_changed=True)
        ex.ttfb = ttfb
        if resp.status_code != 200 or not inspectable(resp):
            if resp.status_code == 200:
                ex.extra_headers.extend(rounds.headers())
                ex.fields.update(rounds.log_fields())
                return ex.relay(resp)  # too large to inspect: as it comes
            error = await ex.read_all(resp, ERROR_BODY_LIMIT) or b""
            shaped = upstream_error(resp.status_code, error)
            return await reply(ex, resp, orjson.dumps(shaped.body()), rounds)


async def reply(ex: Exchange, resp: httpx.Response, body: bytes, rounds: Rounds) -> Response:
    ex.extra_headers.extend(rounds.headers())
    ex.fields.update(rounds.log_fields())
    return await ex.answer_buffered(resp, body)
