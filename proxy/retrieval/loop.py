"""The in-flight retrieval loop, whatever the wire format: when the model calls
`shrink_retrieve`, the proxy answers the call from the store and continues the generation
upstream (the same body plus the round's own items and the answers), at most `retrieve_rounds`
times. The client sees one answer and never the call.

The flow (proxy.flow) reaches it through proxy.retrieval.serve once the upstream was opened and
the overflow retry handled, only when the tool went with the request. A stream is continued by
the format's RoundStream (proxy.retrieval.round_stream); a JSON answer by the loop here, which
asks the format's `Fold` what a round is: chat (proxy.retrieval.chat), Messages
(proxy.retrieval.messages_loop), Responses (proxy.retrieval.responses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson
from fastapi.responses import Response

from proxy.exchange import ClientGone, Exchange, inspectable
from proxy.relay import Relay
from proxy.retrieval.rounds import ERROR_BODY_LIMIT, Call, Rounds

RelayRounds = Callable[[Exchange, httpx.Response, Rounds], Relay]


@dataclass(frozen=True)
class Step:
    """A round to continue: its retrieval calls, the items it appends before their answers,
    and the text it said (chat joins every round's text into its answer)."""

    calls: list[Call]
    said: list[Any]
    text: str | None = None


class Fold(Protocol):
    """What the non-stream loop asks of a format, one request's rounds at a time (a fold may
    keep what earlier rounds showed, for the answer)."""

    def step(self, obj: dict[str, Any], rounds: Rounds) -> Step | None:
        """The round to continue, or None: this round's answer is the client's."""
        ...

    def answer(
        self, obj: dict[str, Any], first: dict[str, Any], rounds: Rounds, data: bytes
    ) -> bytes:
        """The client's answer from the final round (`data`: its bytes as received)."""
        ...

    def refusal(self, status: int, body: bytes) -> bytes:
        """A continuation's error as the client gets it, in the format's shape."""
        ...


async def serve_rounds(
    ex: Exchange, resp: httpx.Response, rounds: Rounds, fold: Fold, relay: RelayRounds
) -> Response | None:
    """The client's answer of a request that carries the retrieval tool; None when this
    response is not one the loop can continue (an error, a stream that is not an event stream,
    a JSON answer too large to inspect): the flow relays it as it would any other."""
    if resp.status_code != 200:
        return None
    if rounds.stream:
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            return None
        return relay(ex, resp, rounds)
    if not inspectable(resp):
        return None
    try:
        return await complete(ex, resp, rounds, fold)
    except ClientGone:
        ex.fields.update(rounds.log_fields())
        ex.log(status=499, client_disconnected=True)
        return Response(status_code=499)


async def complete(ex: Exchange, resp: httpx.Response, rounds: Rounds, fold: Fold) -> Response:
    """The non-stream loop: read each round whole, serve its retrieval calls, continue; the
    last round's answer (or a continuation's error, in the format's shape) goes to the client."""
    first: dict[str, Any] | None = None
    while True:
        data = await ex.read_all(resp)
        assert data is not None  # inspectable: its declared length is under the limit
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            return await reply(ex, resp, data, rounds)  # not an answer: the backend's own
        if first is None:
            first = obj
            ex.note_json_usage(data)  # the first round's prompt is the one our count planned
        step = fold.step(obj, rounds)
        if step is None:
            return await reply(ex, resp, fold.answer(obj, first, rounds, data), rounds)
        rounds.note_usage(obj.get("usage"))
        async with ex.guarded():
            content = await rounds.next_body(ex.state.retrieval, step.said, step.calls, step.text)
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
            return await reply(ex, resp, fold.refusal(resp.status_code, error), rounds)


async def reply(ex: Exchange, resp: httpx.Response, body: bytes, rounds: Rounds) -> Response:
    ex.extra_headers.extend(rounds.headers())
    ex.fields.update(rounds.log_fields())
    return await ex.answer_buffered(resp, body)
