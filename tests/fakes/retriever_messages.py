"""A scripted Anthropic Messages upstream for the retrieval loop: a "model" that reads markers.

The Messages twin of tests/fakes/retriever.py. When a request offers the `shrink_retrieve`
tool and its messages name `Retrieve more: hash=<h>`, it calls the tool for that hash (after a
short text block); once it sees the tool's result, it answers in plain text quoting the result's
first two lines. Stream (Anthropic's events: `message_start`, `content_block_start`, `ping`,
`content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`) and non-stream,
with usage (input tokens: body bytes / 4; output tokens: 7). It records every request. Steered
by headers:

  x-script-hash: <24 hex>   ask for this hash instead of the one in the markers
  x-script-always: 1        call shrink_retrieve in every round (the round limit)
  x-script-both: 1          call the client's first tool beside ours; after the retrieval,
                            call the client's tool alone (the model re-issues it)
  x-script-thinking: 1      a thinking block (with its signature) and a redacted_thinking
                            block open every round that calls a tool
  x-script-fail-round: N    answer continuation round N (1 = the first) with a 500
  x-script-hang-round: N    hold continuation round N until the proxy goes away
  x-script-cut-round: N     round N's stream (0 = the first) ends after its content blocks,
                            without message_delta and message_stop
  x-script-delay: 0.05      wait before answering the first round (the store's TTL runs)
  x-script-chunk-delay: s   pause between SSE events
  x-script-cached: N        report N cache-read input tokens (and 1 cache-creation) per round
  x-script-full-delta: 1    message_delta's usage repeats the input figures (as Anthropic's API
                            now does), not only output_tokens
  x-script-bad-input: 1     the retrieval call's input is not an object (a string)
  x-script-never: 1         never call shrink_retrieve (with x-script-both: call the client's
                            tool alone)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.anthropic import SIGNATURE, THINKING, sse
from tests.fakes.retriever import HASH, NAME, Scripted, paced

OUTPUT_TOKENS = 7
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def block_text(block: dict[str, Any]) -> str:
    content = block.get("content", block.get("text"))
    if isinstance(content, list):
        return "\n".join(block_text(b) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def rounds_served(messages: list[dict[str, Any]]) -> int:
    """Continuations so far: the assistant messages that called our tool."""
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        and any(b.get("type") == "tool_use" and b.get("name") == NAME for b in blocks_of(m))
    )


def decide(body: dict[str, Any], h: Any, served: int) -> list[dict[str, Any]]:
    """The content blocks of this round's answer."""
    messages = body.get("messages") or []
    names = tool_names(body)
    last = messages[-1] if messages else {}
    client_tool = next((n for n in names if n != NAME), None)
    text = "\n".join(block_text(b) for m in messages for b in blocks_of(m))
    wanted = h.get("x-script-hash") or next(iter(HASH.findall(text)), None)
    thinking: list[dict[str, Any]] = []
    if h.get("x-script-thinking"):
        thinking = [
            {"type": "thinking", "thinking": f"{THINKING} ({served})", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
        ]

    def use(name: str, i: int, arguments: Any) -> dict[str, Any]:
        return {"type": "tool_use", "id": f"toolu_{served}_{i}", "name": name, "input": arguments}

    if h.get("x-script-never"):
        if h.get("x-script-both") and client_tool:
            return [*thinking, {"type": "text", "text": "Looking. "}, use(client_tool, 0, {})]
        return [{"type": "text", "text": "Plain answer."}]
    if NAME in names and wanted and (served == 0 or h.get("x-script-always")):
        ours = use(NAME, 1, "not an object" if h.get("x-script-bad-input") else {"hash": wanted})
        calls = [ours]
        if h.get("x-script-both") and client_tool:
            calls.insert(0, use(client_tool, 0, {"cmd": "ls"}))
        return [*thinking, {"type": "text", "text": "Looking. "}, *calls]
    results = [b for b in blocks_of(last) if b.get("type") == "tool_result"]
    if last.get("role") == "user" and results and served:
        if h.get("x-script-both") and client_tool:
            return [*thinking, use(client_tool, 0, {"cmd": "ls"})]
        quote = " | ".join(block_text(results[-1]).splitlines()[:2])
        return [{"type": "text", "text": f"I read: {quote}"}]
    return [{"type": "text", "text": "Plain answer."}]


FAILURE = {"type": "error", "error": {"type": "api_error", "message": "scripted failure"}}


@dataclass
class FakeMessagesRetriever(Scripted):
    sent: bytes = b""  # the latest stream's bytes, as written

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count, methods=["POST"]),
            ]
        )

    async def count(self, request: Request) -> Response:
        rec = await self.record(request)
        return JSONResponse({"input_tokens": len(rec.body) // 4})

    async def messages(self, request: Request) -> Response:
        rec = await self.record(request)
        body = orjson.loads(rec.body)
        h = request.headers
        served = rounds_served(body.get("messages") or [])
        if (early := await self.steered(request, served, FAILURE)) is not None:
            return early
        content = decide(body, h, served)
        cached = int(h.get("x-script-cached", "0"))
        usage = {
            "input_tokens": len(rec.body) // 4,
            "cache_creation_input_tokens": 1 if cached else 0,
            "cache_read_input_tokens": cached,
            "output_tokens": OUTPUT_TOKENS,
        }
        message = {
            "id": f"msg_round{served}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return JSONResponse(message)
        events = stream_events(message, full_delta=bool(h.get("x-script-full-delta")))
        if h.get("x-script-cut-round") == str(served):
            events = events[:-2]
        delay = float(h.get("x-script-chunk-delay", "0"))
        self.sent = b"".join(events)
        return StreamingResponse(paced(events, delay), media_type="text/event-stream")


def stream_events(message: dict[str, Any], *, full_delta: bool = False) -> list[bytes]:
    """`message` as Anthropic streams it: text in word pieces, a thinking block's text then its
    signature, a tool_use's input JSON in three pieces (the first empty), a redacted_thinking
    block whole in its start; a ping after the first block's start."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    out = [sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        empty = block
        if kind == "text":
            empty = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": w} for w in re.findall(r"\S+\s*|\s+", block["text"])
            ]
        elif kind == "tool_use":
            empty = {**block, "input": {}}
            js = orjson.dumps(block["input"]).decode()
            cut = len(js) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in ("", js[:cut], js[cut:])
            ]
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"][:9]},
                {"type": "thinking_delta", "thinking": block["thinking"][9:]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
        )
        if index == 0:
            out.append(sse("ping", {"type": "ping"}))
        out += [
            sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta_usage = dict(usage) if full_delta else {"output_tokens": usage["output_tokens"]}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    end = {"type": "message_delta", "delta": delta, "usage": delta_usage}
    out.append(sse("message_delta", end))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return out
