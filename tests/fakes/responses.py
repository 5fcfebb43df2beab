"""A fake OpenAI Responses API upstream that records every request it receives.

`POST /v1/responses` (a JSON response object, or the typed SSE stream: `response.created`,
`response.in_progress`, `response.output_item.added`, `response.content_part.added`,
`response.output_text.delta` ... `response.function_call_arguments.delta` ...,
`response.output_item.done`, `response.completed` with the usage) and
`POST /v1/responses/input_tokens`. Each request's headers and body bytes are kept in `requests`
(the `Recorded` of the OpenAI fake). Serve it with
`tests.fakes.server.serve(FakeResponses().app())`.

Tokens are counted with one stated rule, so tests can compute what the fake will say:
`count_tokens(body)` is one token per 4 bytes, rounded up, of `{"instructions", "input",
"tools"}` (those present, in that order) as compact JSON. With `context_limit` set, a prompt over
it gets OpenAI's 400 (`context_length_exceeded`, "This model's maximum context length is M tokens.
However, your messages resulted in N tokens.", as vLLM and OpenAI word it).

Per request, `x-fake-*` headers:

  x-fake-answer: text         text (default) | function_call (calls the request's first tool)
  x-fake-reasoning: 1         a reasoning item (with encrypted_content) opens the output
  x-fake-status: 503          answer with this status and an OpenAI-shaped error body
  x-fake-chunks: 5            text deltas in the answer (default 3)
  x-fake-drop-after: 2        drop the connection after N SSE events (no response.completed)
"""

from __future__ import annotations

import itertools
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

ENCRYPTED = "gAAAAABfakeEncryptedReasoningState=="


def count_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer: ceil(bytes / 4) of the prompt's parts as compact JSON."""
    parts = {k: body[k] for k in ("instructions", "input", "tools") if k in body}
    return -(-len(orjson.dumps(parts)) // 4)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> Any:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def sse(data: dict[str, Any]) -> bytes:
    """One event as OpenAI writes it: its type as the event name, then its JSON."""
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass
class FakeResponses:
    url: str = ""  # its base URL, without /v1, once served (tests/conftest.py sets it)
    requests: list[Recorded] = field(default_factory=list)
    context_limit: int | None = None
    streams_completed: int = 0
    sent: bytes = b""  # the bytes of the latest stream, as written
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def reset(self) -> None:
        with self.lock:
            self.context_limit = None
            self.requests.clear()
            self.streams_completed = 0
            self.sent = b""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/v1/responses/input_tokens", self.count, methods=["POST"]),
                Route("/{path:path}", self.not_found, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )

    async def record(self, request: Request) -> Recorded:
        rec = await recorded(request)
        with self.lock:
            self.requests.append(rec)
        return rec

    @staticmethod
    def error(status: int, message: str, type_: str, code: str | None = None) -> Response:
        return JSONResponse(error_body(message, type_, code), status_code=status)

    def refusal(self, request: Request, rec: Recorded) -> tuple[Response | None, Any]:
        if status := request.headers.get("x-fake-status"):
            return self.error(int(status), f"fake upstream error {status}", "server_error"), None
        try:
            body = orjson.loads(rec.body)
        except orjson.JSONDecodeError:
            return self.error(
                400, "We could not parse the JSON body", "invalid_request_error"
            ), None
        if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
            return self.error(
                400, "Missing required parameter: 'input'.", "invalid_request_error"
            ), None
        return None, body

    async def not_found(self, request: Request) -> Response:
        await self.record(request)
        return self.error(
            404, f"Not found: {request.method} {request.url.path}", "invalid_request_error"
        )

    async def count(self, request: Request) -> Response:
        rec = await self.record(request)
        refused, body = self.refusal(request, rec)
        if refused is not None:
            return refused
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count_tokens(body)})

    async def responses(self, request: Request) -> Response:
        rec = await self.record(request)
        refused, body = self.refusal(request, rec)
        if refused is not None:
            return refused
        prompt = count_tokens(body)
        if self.context_limit is not None and prompt > self.context_limit:
            return self.error(
                400,
                f"This model's maximum context length is {self.context_limit} tokens. However, "
                f"your messages resulted in {prompt} tokens. Please reduce the length of the "
                "messages.",
                "invalid_request_error",
                "context_length_exceeded",
            )
        h = request.headers
        n = int(h.get("x-fake-chunks", "3"))
        output = self.output(
            h.get("x-fake-answer", "text"), body, n, h.get("x-fake-reasoning") == "1"
        )
        response = self.response(body, output, prompt, n)
        if body.get("stream"):
            drop = int(h["x-fake-drop-after"]) if h.get("x-fake-drop-after") else None
            return StreamingResponse(self.stream(response, drop), media_type="text/event-stream")
        return JSONResponse(response)

    def output(self, answer: str, body: dict[str, Any], n: int, reasoning: bool) -> list[Any]:
        k = next(self._ids)
        out: list[Any] = []
        if reasoning:
            out.append(
                {
                    "type": "reasoning",
                    "id": f"rs_fake{k}",
                    "summary": [{"type": "summary_text", "text": "Thinking it over."}],
                    "encrypted_content": ENCRYPTED,
                }
            )
        if answer == "function_call":
            tools = body.get("tools") or [{}]
            name = tools[0].get("name", "fake_tool") if isinstance(tools[0], dict) else "fake_tool"
            out.append(
                {
                    "type": "function_call",
                    "id": f"fc_fake{k}",
                    "call_id": f"call_fake{k}",
                    "name": name,
                    "arguments": '{"query":"fake","n":1}',
                    "status": "completed",
                }
            )
            return out
        text = "".join(f"tok{i} " for i in range(n))
        out.append(
            {
                "type": "message",
                "id": f"msg_fake{k}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
        return out

    def response(
        self, body: dict[str, Any], output: list[Any], prompt: int, n: int
    ) -> dict[str, Any]:
        return {
            "id": f"resp_fake{next(self._ids)}",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": "completed",
            "model": body.get("model", "fake-model"),
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "instructions": body.get("instructions"),
            "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store", True),
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": n,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + n,
            },
        }

    @staticmethod
    def events(response: dict[str, Any]) -> list[bytes]:
        """The typed SSE events of `response`, as OpenAI streams it."""
        seq = itertools.count()
        start = {**response, "status": "in_progress", "output": [], "usage": None}
        out = [
            {"type": "response.created", "response": start},
            {"type": "response.in_progress", "response": start},
        ]
        for index, item in enumerate(response["output"]):
            base = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "message":
                text = item["content"][0]["text"]
                empty = {**item, "status": "in_progress", "content": []}
                part = {"type": "output_text", "text": "", "annotations": []}
                out.append(
                    {"type": "response.output_item.added", "output_index": index, "item": empty}
                )
                out.append(
                    {
                        "type": "response.content_part.added",
                        **base,
                        "content_index": 0,
                        "part": part,
                    }
                )
                for piece in text.split(" ")[:-1]:
                    out.append(
                        {
                            "type": "response.output_text.delta",
                            **base,
                            "content_index": 0,
                            "delta": piece + " ",
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
                out.append(
                    {"type": "response.output_item.added", "output_index": index, "item": empty}
                )
                args = item["arguments"]
                for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
                    out.append(
                        {"type": "response.function_call_arguments.delta", **base, "delta": piece}
                    )
                out.append(
                    {"type": "response.function_call_arguments.done", **base, "arguments": args}
                )
            else:
                out.append(
                    {"type": "response.output_item.added", "output_index": index, "item": item}
                )
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        out.append({"type": "response.completed", "response": response})
        return [sse({**e, "sequence_number": next(seq)}) for e in out]

    async def stream(self, response: dict[str, Any], drop: int | None) -> AsyncIterator[bytes]:
        self.sent = b""
        for i, event in enumerate(self.events(response)):
            if drop is not None and i == drop:
                raise ConnectionAbortedError("fake upstream drops the connection")
            self.sent += event
            yield event
        with self.lock:
            self.streams_completed += 1
