"""A fake OpenAI-compatible upstream that records every request it receives.

Behaviour is steered per request by `x-fake-*` headers (they pass through the proxy like any
end-to-end header), so one server serves every test:

  x-fake-status: 503          answer with this status and an OpenAI-shaped error body
  x-fake-delay: 0.5           wait before sending headers
  x-fake-hang: 1              never answer (until the client goes away)
  x-fake-chunks: 5            SSE chunks to send for stream: true (default 3)
  x-fake-chunk-delay: 0.2     pause between SSE chunks
  x-fake-drop-after: 2        drop the connection after N SSE chunks
  x-fake-raw-sse: <text>      send this text verbatim as the SSE body (malformed-SSE tests)
  x-fake-set-cookie: <value>  GET /v1/models answers with this Set-Cookie header
  x-fake-linger: 1            after `data: [DONE]`, wait this long before ending the body
  x-fake-cached: 100          report this many cached prompt tokens (prompt_tokens_details)
  x-fake-timings: 90,10       report llama.cpp's `timings` with this cache_n,prompt_n
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Recorded:
    method: str
    path: str
    raw_path: bytes
    query: bytes
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        return orjson.loads(self.body)


async def recorded(request: Request) -> Recorded:
    """What a fake received: method, paths, query, headers as sent, body bytes."""
    return Recorded(
        method=request.method,
        path=request.url.path,
        raw_path=request.scope.get("raw_path", b""),
        query=request.scope.get("query_string", b""),
        headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]],
        body=await request.body(),
    )


@dataclass
class FakeUpstream:
    requests: list[Recorded] = field(default_factory=list)
    # Set when a response body was abandoned by the reader (client of the fake went away).
    streams_cancelled: int = 0
    streams_completed: int = 0
    cancelled_event: threading.Event = field(default_factory=threading.Event)
    # time.monotonic() at which each SSE chunk of the latest stream was handed to the server.
    sent_times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.streams_cancelled = 0
            self.streams_completed = 0
            self.sent_times = []
            self.cancelled_event.clear()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/openai/deployments/{dep}/chat/completions", self.chat, methods=["POST"]),
                Route("/openai/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/{path:path}", self.echo, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
            ]
        )

    async def record(self, request: Request) -> Recorded:
        rec = await recorded(request)
        with self.lock:
            self.requests.append(rec)
        return rec

    async def common(self, request: Request, rec: Recorded) -> Response | None:
        h = request.headers
        if h.get("x-fake-hang"):
            # Block on receive() until the client (the proxy) goes away.
            while (await request.receive())["type"] != "http.disconnect":
                pass
            self._cancelled()
            return Response(status_code=499)
        if h.get("x-fake-delay"):
            await asyncio.sleep(float(h["x-fake-delay"]))
        if h.get("x-fake-status"):
            status = int(h["x-fake-status"])
            return JSONResponse(
                {
                    "error": {
                        "message": f"fake upstream error {status}",
                        "type": "server_error" if status >= 500 else "invalid_request_error",
                        "param": None,
                        "code": "fake_error",
                    }
                },
                status_code=status,
                headers={"x-upstream-marker": "yes"},
            )
        return None

    def _cancelled(self) -> None:
        with self.lock:
            self.streams_cancelled += 1
        self.cancelled_event.set()

    async def models(self, request: Request) -> Response:
        rec = await self.record(request)
        early = await self.common(request, rec)
        if early is not None:
            return early
        cookie = request.headers.get("x-fake-set-cookie")
        return JSONResponse(
            {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "me"}]},
            headers={"set-cookie": cookie} if cookie else None,
        )

    async def echo(self, request: Request) -> Response:
        rec = await self.record(request)
        early = await self.common(request, rec)
        if early is not None:
            return early
        return JSONResponse(
            {
                "method": rec.method,
                "path": rec.path,
                "query": rec.query.decode("latin-1"),
                "body_len": len(rec.body),
            },
            headers={"x-echo": "1", "set-cookie": "a=1"},
        )

    async def chat(self, request: Request) -> Response:
        rec = await self.record(request)
        early = await self.common(request, rec)
        if early is not None:
            return early
        body = orjson.loads(rec.body) if rec.body else {}
        model = body.get("model", "fake-model")
        prompt_chars = len(rec.body)
        extra = cache_report(request)
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            usage = prompt_chars // 4 if opts.get("include_usage") else None
            return StreamingResponse(
                self.sse(request, model, usage, extra),
                media_type="text/event-stream",
                headers={"x-upstream-marker": "yes"},
            )
        return JSONResponse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hello from fake upstream."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_chars // 4,
                    "completion_tokens": 5,
                    "total_tokens": prompt_chars // 4 + 5,
                    **extra.get("usage", {}),
                },
                **{k: v for k, v in extra.items() if k != "usage"},
            },
            headers={"x-upstream-marker": "yes"},
        )

    async def sse(self, request: Request, model: str, usage: int | None = None, extra=None):
        h = request.headers
        if h.get("x-fake-raw-sse") is not None:
            yield h["x-fake-raw-sse"].encode().decode("unicode_escape").encode()
            return
        n = int(h.get("x-fake-chunks", "3"))
        delay = float(h.get("x-fake-chunk-delay", "0"))
        drop_after = int(h["x-fake-drop-after"]) if h.get("x-fake-drop-after") else None
        completed = False
        self.sent_times = []
        try:
            for i in range(n):
                if drop_after is not None and i == drop_after:
                    raise ConnectionAbortedError("fake upstream drops the connection")
                chunk = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": f"tok{i} "}
                            if i
                            else {"role": "assistant", "content": "tok0 "},
                            "finish_reason": None,
                        }
                    ],
                }
                self.sent_times.append(time.monotonic())
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                if delay:
                    await asyncio.sleep(delay)
            final = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
            yield b"data: " + orjson.dumps(final) + b"\n\n"
            if usage is not None:
                # As OpenAI sends it: a last chunk with no choices and the usage.
                tail = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": usage,
                        "completion_tokens": n,
                        "total_tokens": usage + n,
                        **(extra or {}).get("usage", {}),
                    },
                    **{k: v for k, v in (extra or {}).items() if k != "usage"},
                }
                yield b"data: " + orjson.dumps(tail) + b"\n\n"
            yield b"data: [DONE]\n\n"
            if h.get("x-fake-linger"):
                await asyncio.sleep(float(h["x-fake-linger"]))
            completed = True
        finally:
            if completed:
                with self.lock:
                    self.streams_completed += 1
            elif drop_after is None:
                self._cancelled()


def cache_report(request: Request) -> dict:
    """The prefix-cache figures a backend adds to its answer, as `x-fake-cached` and
    `x-fake-timings` ask (OpenAI/vLLM's cached_tokens; llama.cpp's timings)."""
    out: dict = {}
    cached = request.headers.get("x-fake-cached")
    if cached is not None:
        out["usage"] = {"prompt_tokens_details": {"cached_tokens": int(cached)}}
    timings = request.headers.get("x-fake-timings")
    if timings is not None:
        cache_n, prompt_n = (int(x) for x in timings.split(","))
        out["timings"] = {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": 1.0}
    return out
