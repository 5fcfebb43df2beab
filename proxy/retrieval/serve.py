"""Which loop serves a request's retrieval rounds: one per wire format that offers the tool
(`WireFormat.retrieval_tool`), each with the `Shape` of its continuation. The flow reaches
them only through `shape_of` and `serve_rounds`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from fastapi.responses import Response

from proxy.exchange import Exchange
from proxy.retrieval import loop, messages_loop, responses
from proxy.retrieval.messages import MESSAGES_SHAPE
from proxy.retrieval.responses_items import RESPONSES_SHAPE
from proxy.retrieval.rounds import CHAT_SHAPE, Rounds, Shape

Serve = Callable[[Exchange, httpx.Response, Rounds], Awaitable[Response | None]]

LOOPS: dict[str, tuple[Shape, Serve]] = {
    "chat": (CHAT_SHAPE, loop.serve_rounds),
    "anthropic": (MESSAGES_SHAPE, messages_loop.serve_rounds),
    "responses": (RESPONSES_SHAPE, responses.serve_rounds),
}


def shape_of(fmt: str) -> Shape:
    return LOOPS[fmt][0]


async def serve_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response | None:
    """The client's answer of a request that carries the retrieval tool (None: the flow
    relays `resp` as any other; see each loop's own `serve_rounds`)."""
    return await LOOPS[rounds.shape.name][1](ex, resp, rounds)
