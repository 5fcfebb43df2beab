"""The non-stream retrieval loop of an Anthropic Messages request, and the dispatch of a
Messages request's rounds (a stream goes to proxy.retrieval.messages_stream). What a round's
continuation and the client's answer are is proxy.retrieval.messages."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from fastapi.responses import Response

from proxy.exchange import ClientGone, Exchange, inspectable
from proxy.retrieval.messages import (
    anthropic_error,
    call_of,
    continues,
    finished,
    is_ours,
    is_use,
    said,
)
from proxy.retrieval.messages_stream import relay_rounds
from proxy.retrieval.rounds import ERROR_BODY_LIMIT, Rounds


async def serve_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response | None:
    """The client's answer of a Messages request that carries the retrieval tool; None when
    this response is not one the loop can continue (an error, a stream that is not an event
    stream, a JSON answer too large to inspect): the flow relays it as it would any other."""
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
    last round's message (or a continuation's error, in Anthropic's shape) goes to the client."""
    first: dict[str, Any] | None = None
    earlier: list[Any] = []  # the continued rounds' blocks the client gets
    while True:
        data = await ex.read_all(resp)
        assert data is not None  # inspectable: its declared length is under the limit
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            return await reply(ex, resp, data, rounds)  # not a message: the backend's own
        if first is None:
            first = obj
            ex.note_json_usage(data)  # the first round's prompt is the one our count planned
        content = obj.get("content")
        if not continues(content, obj.get("stop_reason"), rounds):
            done = finished(obj, first, earlier, rounds)
            return await reply(ex, resp, orjson.dumps(done), rounds)
        assert isinstance(content, list)
        rounds.note_usage(obj.get("usage"))
        ours = [call_of(b, n) for n, b in enumerate(content) if is_ours(b)]
        earlier += [b for b in content if not is_use(b)]
        async with ex.guarded():
            body = await rounds.next_body(ex.state.retrieval, [said(content, ours)], ours)
        ex.state.metrics.retrieve_rounds.inc()
        ttfb = ex.ttfb  # the client waited for the first round's headers, not this one's
        resp = await ex.open(body, body_changed=True)
        ex.ttfb = ttfb
        if resp.status_code != 200 or not inspectable(resp):
            if resp.status_code == 200:
                ex.extra_headers.extend(rounds.headers())
                ex.fields.update(rounds.log_fields())
                return ex.relay(resp)  # too large to inspect: as it comes
            error = await ex.read_all(resp, ERROR_BODY_LIMIT) or b""
            shaped = anthropic_error(resp.status_code, error)
            return await reply(ex, resp, orjson.dumps(shaped.anthropic_body()), rounds)


async def reply(ex: Exchange, resp: httpx.Response, body: bytes, rounds: Rounds) -> Response:
    ex.extra_headers.extend(rounds.headers())
    ex.fields.update(rounds.log_fields())
    return await ex.answer_buffered(resp, body)
