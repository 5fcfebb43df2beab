"""Which loop serves a request's retrieval rounds: one per wire format that offers the tool
(`WireFormat.retrieval_tool`), each the `Shape` of its continuation, the `Fold` of its JSON
answers and the relay of its streams. The flow reaches them only through `shape_of` and
`serve_rounds`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import httpx
from fastapi.responses import Response

from proxy.exchange import Exchange
from proxy.retrieval import loop, messages_stream, responses_stream, stream
from proxy.retrieval.chat import ChatFold
from proxy.retrieval.messages import MESSAGES_SHAPE
from proxy.retrieval.messages_loop import MessagesFold
from proxy.retrieval.responses import ResponsesFold
from proxy.retrieval.responses_items import RESPONSES_SHAPE
from proxy.retrieval.rounds import CHAT_SHAPE, Rounds, Shape


class Loop(NamedTuple):
    shape: Shape
    fold: Callable[[], loop.Fold]
    relay: loop.RelayRounds


LOOPS: dict[str, Loop] = {
    "chat": Loop(CHAT_SHAPE, ChatFold, stream.relay_rounds),
    "anthropic": Loop(MESSAGES_SHAPE, MessagesFold, messages_stream.relay_rounds),
    "responses": Loop(RESPONSES_SHAPE, ResponsesFold, responses_stream.relay_rounds),
}


def shape_of(fmt: str) -> Shape:
    return LOOPS[fmt].shape


async def serve_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Response | None:
    """The client's answer of a request that carries the retrieval tool (None: the flow
    relays `resp` as any other; see proxy.retrieval.loop)."""
    one = LOOPS[rounds.shape.name]
    return await loop.serve_rounds(ex, resp, rounds, one.fold(), one.relay)
