"""A scripted OpenAI Responses upstream for the retrieval loop: a "model" that reads markers.

As tests/fakes/retriever.py does for Chat Completions: when a request offers the
`shrink_retrieve` tool and its input names `Retrieve more: hash=<h>`, the model writes a short
text and calls the tool for that hash; once it sees the call's `function_call_output`, it
answers in plain text quoting the output's first two lines. JSON or the typed SSE stream
(`response.created` ... `response.completed`, each event with its `sequence_number`), with
usage (input tokens: body bytes / 4). Every request is recorded. Steered by headers:

  x-script-hash: <24 hex>   ask for this hash instead of the one in the markers
  x-script-always: 1        call shrink_retrieve in every round (the round limit)
  x-script-both: 1          call the client's first function tool beside ours; after the
                            retrieval, call the client's tool alone (the model re-issues it)
  x-script-bad-args: 1      our call's arguments are not JSON
  x-script-quiet: 1         never call shrink_retrieve (a plain answer, or the client's tool)
  x-script-reasoning: 1     a reasoning item (with encrypted_content) opens each round's output
  x-script-silent: 1        a round that calls a tool writes no text first (its reasoning, if
                            any, is followed by the call)
  x-script-output-text: 1   the JSON response carries `output_text` (some servers add it)
  x-script-fail-round: N    answer continuation round N (1 = the first) with a 500
  x-script-hang-round: N    hold continuation round N until the proxy goes away
  x-script-cut-round: N     end round N's stream (0 = the first) before response.completed
  x-script-delay: 0.05      wait before answering the first round (the store's TTL runs)
  x-script-chunk-delay: s   pause between SSE events
  x-script-cached: N        report N cached input tokens in every round
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.retriever import HASH, NAME, Scripted, Step, paced

OUTPUT_TOKENS = 7
REASONING_TOKENS = 2
ENCRYPTED = "gAAAAABscriptedEncryptedReasoning/+=="


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") for t in body.get("tools") or [] if t.get("type") == "function"]


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    value = body.get("input")
    return [{"role": "user", "content": value}] if isinstance(value, str) else value or []


def rounds_served(items: list[dict[str, Any]]) -> int:
    """Continuations so far: the calls of our tool in the input."""
    return sum(1 for i in items if i.get("type") == "function_call" and i.get("name") == NAME)


def text_of(item: dict[str, Any]) -> str:
    content = item.get("content", item.get("output"))
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def decide(body: dict[str, Any], h: Any) -> Step:
    items = input_items(body)
    names = tool_names(body)
    served = rounds_served(items)
    last = items[-1] if items else {}
    client_tool = next((n for n in names if n != NAME), None)
    wanted = h.get("x-script-hash") or next(
        iter(HASH.findall("\n".join(text_of(i) for i in items))), None
    )
    if h.get("x-script-quiet"):
        if h.get("x-script-both") and client_tool:
            return Step("Running. ", [(client_tool, {"cmd": "ls"})])
        return Step("Plain answer.")
    if NAME in names and wanted and (served == 0 or h.get("x-script-always")):
        calls: list[tuple[str, Any]] = [(NAME, {"hash": wanted})]
        if h.get("x-script-bad-args"):
            calls = [(NAME, '{"hash": "' + wanted)]
        if h.get("x-script-both") and client_tool:
            calls.insert(0, (client_tool, {"cmd": "ls"}))
        return Step("Looking. ", calls)
    if last.get("type") == "function_call_output" and served:
        if h.get("x-script-both") and client_tool:
            return Step("", [(client_tool, {"cmd": "ls"})])
        quote = " | ".join(text_of(last).splitlines()[:2])
        return Step(f"I read: {quote}")
    return Step("Plain answer.")


def sse(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def events(response: dict[str, Any], cut: bool) -> list[bytes]:
    """The typed events of `response`, as OpenAI streams them (text in word pieces, a call's
    arguments in two); `cut`: without the final `response.completed`."""
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(response["output"]):
        base = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            empty = {**item, "status": "in_progress", "content": []}
            out.append({"type": "response.output_item.added", "output_index": index, "item": empty})
            part = {"type": "output_text", "text": "", "annotations": []}
            out.append(
                {"type": "response.content_part.added", **base, "content_index": 0, "part": part}
            )
            for piece in re.findall(r"\S+\s*", text):
                out.append(
                    {
                        "type": "response.output_text.delta",
                        **base,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }
                )
            out.append(
                {
                    "type": "response.output_text.done",
                    **base,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                }
            )
            out.append(
                {
                    "type": "response.content_part.done",
                    **base,
                    "content_index": 0,
                    "part": item["content"][0],
                }
            )
        elif item["type"] == "function_call":
            empty = {**item, "arguments": "", "status": "in_progress"}
            out.append({"type": "response.output_item.added", "output_index": index, "item": empty})
            args = item["arguments"]
            for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
                out.append(
                    {"type": "response.function_call_arguments.delta", **base, "delta": piece}
                )
            out.append({"type": "response.function_call_arguments.done", **base, "arguments": args})
        else:
            out.append({"type": "response.output_item.added", "output_index": index, "item": item})
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if not cut:
        out.append({"type": "response.completed", "response": response})
    return [sse({**e, "sequence_number": n}) for n, e in enumerate(out)]


FAILURE = {
    "error": {"message": "scripted failure", "type": "server_error", "code": "boom", "param": None}
}


@dataclass
class FakeResponsesRetriever(Scripted):
    sent: list[bytes] = field(default_factory=list)  # each stream's bytes, as written
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.sent.clear()

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/responses", self.responses, methods=["POST"])])

    async def responses(self, request: Request) -> Response:
        rec = await self.record(request)
        body = orjson.loads(rec.body)
        h = request.headers
        served = rounds_served(input_items(body))
        if (early := await self.steered(request, served, FAILURE)) is not None:
            return early
        response = self.response(body, decide(body, h), served, h, len(rec.body) // 4)
        if body.get("stream"):
            cut = h.get("x-script-cut-round") == str(served)
            delay = float(h.get("x-script-chunk-delay", "0"))
            return StreamingResponse(
                self.written(paced(events(response, cut), delay)), media_type="text/event-stream"
            )
        if h.get("x-script-output-text"):
            messages = [i for i in response["output"] if i["type"] == "message"]
            response["output_text"] = "".join(p["text"] for m in messages for p in m["content"])
        return JSONResponse(response)

    async def written(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        with self.lock:
            self.sent.append(b"")
            n = len(self.sent) - 1
        async for chunk in chunks:
            with self.lock:
                self.sent[n] += chunk
            yield chunk

    def response(
        self, body: dict[str, Any], step: Step, served: int, h: Any, prompt: int
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        reasoning = bool(h.get("x-script-reasoning"))
        if reasoning:
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_round{served}",
                    "summary": [{"type": "summary_text", "text": f"Round {served} thoughts."}],
                    "encrypted_content": f"{ENCRYPTED}{served}",
                }
            )
        if step.text and not (h.get("x-script-silent") and step.calls):
            output.append(
                {
                    "type": "message",
                    "id": f"msg_round{served}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                }
            )
        for i, (name, args) in enumerate(step.calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_round{served}_{i}",
                    "call_id": f"call_{served}_{i}",
                    "name": name,
                    "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                    "status": "completed",
                }
            )
        return {
            "id": f"resp_round{served}_{next(self._ids)}",
            "object": "response",
            "created_at": 1_700_000_000 + served,
            "status": "completed",
            "model": body.get("model", "fake-model"),
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "store": body.get("store", True),
            "previous_response_id": body.get("previous_response_id"),
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": int(h.get("x-script-cached", "0"))},
                "output_tokens": OUTPUT_TOKENS,
                "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS if reasoning else 0},
                "total_tokens": prompt + OUTPUT_TOKENS,
            },
        }
