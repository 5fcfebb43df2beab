"""Messages' side of the retrieval loop's JSON answers (proxy.retrieval.loop): which round
continues, and the one message the client gets (proxy.retrieval.messages says what both are).
Its stream is proxy.retrieval.messages_stream."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.retrieval.loop import Step
from proxy.retrieval.messages import (
    anthropic_error,
    call_of,
    continues,
    finished,
    is_use,
    said,
)
from proxy.retrieval.rounds import Rounds


class MessagesFold:
    def __init__(self) -> None:
        self.earlier: list[Any] = []  # the continued rounds' blocks the client gets

    def step(self, obj: dict[str, Any], rounds: Rounds) -> Step | None:
        content = obj.get("content")
        if not continues(content, obj.get("stop_reason"), rounds):
            return None
        assert isinstance(content, list)
        calls = [call_of(b, n) for n, b in enumerate(content) if is_use(b)]
        self.earlier += [b for b in content if not is_use(b)]
        return Step(calls, [said(content, calls)])

    def answer(
        self, obj: dict[str, Any], first: dict[str, Any], rounds: Rounds, data: bytes
    ) -> bytes:
        return orjson.dumps(finished(obj, first, self.earlier, rounds))

    def refusal(self, status: int, body: bytes) -> bytes:
        return orjson.dumps(anthropic_error(status, body).anthropic_body())
