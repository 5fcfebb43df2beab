"""The in-flight retrieval loop of an OpenAI Responses request (`/v1/responses`): when the
model's output holds `function_call` items of `shrink_retrieve`, the proxy answers them from
the store and continues the generation upstream (the same body; its `input` followed by the
round's output items as produced, and an output per call: a page for ours, NOT_RUN for the
client's function and custom tool calls beside it, whose other kinds are left out), at most
`retrieve_rounds` times. The client gets
one response and never sees the call.

The answer is the last round's response (its `id` is the stored response whose history is
complete: a client chaining `previous_response_id` on it continues from the whole exchange),
its `output` every round's items without ours (an earlier round's calls of the client's are
dropped with that round: the model makes them again), `output_text` recomputed if present, and
usage summed over every round upstream answered. A continuation's refusal is relayed in
OpenAI's shape with the upstream's status. This module is the JSON answers' side of the loop
(proxy.retrieval.loop); the stream's is proxy.retrieval.responses_stream; proxy.wire.responses
says which requests get the tool at all.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.retrieval.loop import Step
from proxy.retrieval.responses_items import calls_in, finished, ours_in, said, shown
from proxy.retrieval.rounds import Rounds, upstream_error


class ResponsesFold:
    def __init__(self) -> None:
        self.before: list[Any] = []  # the continued rounds' items the client sees

    def step(self, obj: dict[str, Any], rounds: Rounds) -> Step | None:
        output = obj.get("output")
        output = output if isinstance(output, list) else []
        ours = ours_in(output)
        if not ours or not rounds.can_continue or obj.get("status") not in (None, "completed"):
            return None
        self.before += shown(output)
        return Step(calls_in(output), said(output))

    def answer(
        self, obj: dict[str, Any], first: dict[str, Any], rounds: Rounds, data: bytes
    ) -> bytes:
        done = finished(obj, self.before, rounds, first)
        return data if done is obj else orjson.dumps(done)

    def refusal(self, status: int, body: bytes) -> bytes:
        return orjson.dumps(upstream_error(status, body).body())
