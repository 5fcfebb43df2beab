"""The in-flight retrieval loop of an OpenAI Responses request (`/v1/responses`): when the
model's output holds `function_call` items of `shrink_retrieve`, the proxy answers them from
the store and continues the generation upstream (the same body; its `input` followed by the
round's output items as produced, the client's own calls of that round left out, and one
`function_call_output` per retrieval call), at most `retrieve_rounds` times. The client gets
one response and never sees the call.

The answer is the last round's response (its `id` is the stored response whose history is
complete: a client chaining `previous_response_id` on it continues from the whole exchange),
its `output` every round's items without ours (an earlier round's calls of the client's are
dropped with that round: the model makes them again), `output_text` recomputed if present, and
usage summed over every round upstream answered. A continuation's refusal is relayed in
OpenAI's shape with the upstream's status. This module holds the non-stream loop and what the
stream's (proxy.retrieval.responses_stream) shares with it; proxy.wire.responses says which
requests get the tool at all.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from fastapi.responses import Response

from proxy.exchange import ClientGone, Exchange, inspectable
from proxy.retrieval.responses_items import finished, ours_in, said, shown
from proxy.retrieval.responses_stream import relay_rounds
from proxy.retrieval.rounds import ERROR_BODY_LIMIT, Rounds, upstream_error


async def serve_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response | None:
    """The client's answer of a Responses request that carries the retrieval tool; None when
    this response is not one the loop can continue (an error, a stream that is not an event
    stream, a JSON answer too large to inspect): the flow relays it as any other."""
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
    last round's answer (or a continuation's error, in OpenAI's shape) goes to the client."""
    first: dict[str, Any] | None = None
    before: list[Any] = []  # the continued rounds' items the client sees
    while True:
        data = await ex.read_all(resp)
        assert data is not None  # inspectable: its declared length is under the limit
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            return await reply(ex, resp, data, rounds)  # not a response: the backend's own
        if first is None:
            first = obj
            ex.note_json_usage(data)  # the first round's prompt is the one our count planned
        output = obj.get("output")
        output = output if isinstance(output, list) else []
        ours = ours_in(output)
        if not ours or not rounds.can_continue or obj.get("status") not in (None, "completed"):
            done = finished(obj, before, rounds, first)
            body = data if done is obj else orjson.dumps(done)
            return await reply(ex, resp, body, rounds)
        rounds.note_usage(obj.get("usage"))
        before += shown(output)
        async with ex.guarded():
            content = await rounds.next_body(ex.state.retrieval, said(output), ours)
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
