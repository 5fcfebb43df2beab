"""A fake Anthropic Messages API upstream that records every request it receives.

`POST /v1/messages` (a JSON message, or Anthropic's SSE stream: `message_start`,
`content_block_start`, `ping`, `content_block_delta` ... `content_block_stop`, `message_delta`
with the usage, `message_stop`) and `POST /v1/messages/count_tokens`. Each request's headers and
body bytes are kept in `requests` (the `Recorded` of the OpenAI fake). Serve it with
`tests.fakes.server.serve(FakeAnthropic().app())`.

Tokens are counted with one stated rule, so tests can compute what the fake will say:
`count_tokens(body)` is one token per 4 bytes, rounded up, of `{"system", "messages", "tools"}`
(those present, in that order) as compact JSON. With `context_limit` set, a prompt over it gets
Anthropic's real 400 (`prompt is too long: N tokens > M maximum`, `invalid_request_error`), and
a prompt that fits but not with its `max_tokens` gets Anthropic's other one (`input length and
`max_tokens` exceed context limit: N + K > M, ...`). With `prefix_cache` on, the fake reports the
byte prefix it shares with the previous prompt (a fourth of it) as `cache_read_input_tokens`
and the rest as `input_tokens`, as a backend's prefix cache would; off, everything is input.

Per request, `x-fake-*` headers (they pass through the proxy like any end-to-end header):

  x-fake-answer: text         text (default) | tool_use (a text block, then a tool_use block
                              calling the request's first tool) | thinking (a thinking block
                              with its signature, then text)
  x-fake-status: 529          answer with this status and an Anthropic-shaped error body
  x-fake-chunks: 5            text deltas in the answer (default 3)
  x-fake-chunk-delay: 0.2     pause between SSE events
  x-fake-drop-after: 2        drop the connection after N SSE events (no message_stop)
  x-fake-linger: 1            after message_stop, wait this long before ending the body
  x-fake-error-event: overloaded_error
                              after message_start, an in-band `event: error` of this type, then
                              the end of the stream (as Anthropic's API does when it fails mid-way)
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.upstream import Recorded, recorded

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
SIGNATURE = "ErUBCkYIBxgCIkD0fakesignatureAAAA=="
THINKING = "The user wants a short answer; I will give one."


def count_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer: ceil(bytes / 4) of the prompt's parts as compact JSON."""
    return -(-len(prompt_bytes(body)) // 4)


def prompt_bytes(body: dict[str, Any]) -> bytes:
    return orjson.dumps({k: body[k] for k in ("system", "messages", "tools") if k in body})


def error_body(status: int, message: str, type_: str | None = None) -> dict[str, Any]:
    kind = type_ or ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def sse(name: str, data: dict[str, Any]) -> bytes:
    """One event as Anthropic writes it: its name, then its JSON (whose `type` is the name)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass
class FakeAnthropic:
    url: str = ""  # its base URL, without /v1, once served (tests/conftest.py sets it)
    requests: list[Recorded] = field(default_factory=list)
    context_limit: int | None = None
    prefix_cache: bool = False
    # When set, requests must carry this key, as `x-api-key` or `authorization: Bearer` (the
    # anthropic SDK 2.x sends its api_key as a Bearer token), else Anthropic's 401.
    api_key: str | None = None
    streams_completed: int = 0
    streams_dropped: int = 0
    sent: bytes = b""  # the bytes of the latest stream, as written (for byte-for-byte checks)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _previous_prompt: bytes = b""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def reset(self) -> None:
        """Forget what was received, and go back to the defaults (no limit, no cache, no key)."""
        with self.lock:
            self.context_limit = None
            self.prefix_cache = False
            self.api_key = None
            self.requests.clear()
            self.streams_completed = self.streams_dropped = 0
            self.sent = b""
            self._previous_prompt = b""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count, methods=["POST"]),
                Route("/{path:path}", self.not_found, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )

    # --- recording and the checks every route makes ----------------------------------------

    async def record(self, request: Request) -> Recorded:
        rec = await recorded(request)
        with self.lock:
            self.requests.append(rec)
        return rec

    def error(self, status: int, message: str, type_: str | None = None) -> Response:
        return JSONResponse(
            error_body(status, message, type_),
            status_code=status,
            headers={"request-id": f"req_fake{next(self._ids)}", "x-upstream-marker": "yes"},
        )

    def refusal(self, request: Request, rec: Recorded) -> tuple[Response | None, Any]:
        """(an error answer, None), or (None, the parsed body)."""
        if self.api_key is not None and self.api_key not in (
            request.headers.get("x-api-key"),
            request.headers.get("authorization", "").removeprefix("Bearer "),
        ):
            return self.error(401, "invalid x-api-key"), None
        if status := request.headers.get("x-fake-status"):
            return self.error(int(status), f"fake upstream error {status}"), None
        try:
            body = orjson.loads(rec.body)
        except orjson.JSONDecodeError:
            return self.error(400, "There was an error parsing the body of your request"), None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self.error(400, "messages: Field required"), None
        return None, body

    async def not_found(self, request: Request) -> Response:
        await self.record(request)
        return self.error(404, f"Not found: {request.method} {request.url.path}")

    # --- routes ----------------------------------------------------------------------------

    async def count(self, request: Request) -> Response:
        rec = await self.record(request)
        refused, body = self.refusal(request, rec)
        if refused is not None:
            return refused
        return JSONResponse({"input_tokens": count_tokens(body)})

    async def messages(self, request: Request) -> Response:
        rec = await self.record(request)
        refused, body = self.refusal(request, rec)
        if refused is not None:
            return refused
        if not isinstance(body.get("max_tokens"), int):
            return self.error(400, "max_tokens: Field required")
        prompt = count_tokens(body)
        if self.context_limit is not None:
            if prompt > self.context_limit:
                return self.error(
                    400, f"prompt is too long: {prompt} tokens > {self.context_limit} maximum"
                )
            if prompt + body["max_tokens"] > self.context_limit:
                return self.error(
                    400,
                    f"input length and `max_tokens` exceed context limit: {prompt} + "
                    f"{body['max_tokens']} > {self.context_limit}, decrease input length or "
                    "`max_tokens` and try again",
                )
        usage = self.input_usage(body, prompt)
        answer = request.headers.get("x-fake-answer", "text")
        n = int(request.headers.get("x-fake-chunks", "3"))
        blocks = self.blocks(answer, body, n)
        stop = "tool_use" if answer == "tool_use" else "end_turn"
        message = {
            "id": f"msg_fake{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake-claude"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": n},
        }
        headers = {"request-id": f"req_fake{next(self._ids)}", "x-upstream-marker": "yes"}
        if body.get("stream"):
            return StreamingResponse(
                self.stream(request, message), media_type="text/event-stream", headers=headers
            )
        return JSONResponse(message, headers=headers)

    def input_usage(self, body: dict[str, Any], prompt: int) -> dict[str, int]:
        cached = 0
        if self.prefix_cache:
            now = prompt_bytes(body)
            with self.lock:
                before, self._previous_prompt = self._previous_prompt, now
            same = next(
                (i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b),
                min(len(before), len(now)),
            )
            cached = min(same // 4, prompt)
        return {
            "input_tokens": prompt - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        }

    @staticmethod
    def blocks(answer: str, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
        text = "".join(f"tok{i} " for i in range(n))
        if answer == "tool_use":
            tools = body.get("tools") or [{}]
            name = tools[0].get("name", "fake_tool") if isinstance(tools[0], dict) else "fake_tool"
            return [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_fake01",
                    "name": name,
                    "input": {"query": "fake", "n": 1},
                },
            ]
        if answer == "thinking":
            return [
                {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
                {"type": "text", "text": text},
            ]
        return [{"type": "text", "text": text}]

    # --- the stream ------------------------------------------------------------------------

    @staticmethod
    def events(message: dict[str, Any]) -> list[bytes]:
        """The SSE events of `message`, as Anthropic's API streams it."""
        usage = message["usage"]
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        out = [sse("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            kind = block["type"]
            if kind == "text":
                empty: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": piece}
                    for piece in re.findall(r"\S+\s*|\s+", block["text"])
                ]
            elif kind == "tool_use":
                empty = {**block, "input": {}}
                js = orjson.dumps(block["input"]).decode()
                cut = len(js) // 2
                deltas = [
                    {"type": "input_json_delta", "partial_json": part}
                    for part in ("", js[:cut], js[cut:])
                ]
            else:  # thinking
                empty = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
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
            out.extend(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": d},
                )
                for d in deltas
            )
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        out.append(
            sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
            )
        )
        out.append(sse("message_stop", {"type": "message_stop"}))
        return out

    async def stream(self, request: Request, message: dict[str, Any]) -> AsyncIterator[bytes]:
        h = request.headers
        delay = float(h.get("x-fake-chunk-delay", "0"))
        drop_after = int(h["x-fake-drop-after"]) if h.get("x-fake-drop-after") else None
        events = self.events(message)
        self.sent = b""
        if kind := h.get("x-fake-error-event"):
            error = sse("error", error_body(529, "Overloaded", kind))
            events = [events[0], error]
        for i, event in enumerate(events):
            if drop_after is not None and i == drop_after:
                with self.lock:
                    self.streams_dropped += 1
                raise ConnectionAbortedError("fake upstream drops the connection")
            self.sent += event
            yield event
            if delay:
                await asyncio.sleep(delay)
        if linger := h.get("x-fake-linger"):
            await asyncio.sleep(float(linger))
        with self.lock:
            self.streams_completed += 1
