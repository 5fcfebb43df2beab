"""A scripted OpenAI-compatible upstream for the retrieval loop: a "model" that reads markers.

When a request offers the `shrink_retrieve` tool and its messages name `Retrieve more:
hash=<h>`, it calls the tool for that hash (after a short text); once it sees the tool's result,
it answers in plain text quoting the result's first two lines. Stream and non-stream, with usage
(prompt tokens: body bytes / 4). It records every request. Steered by headers, as
tests/fakes/upstream.py is:

  x-script-hash: <24 hex>   ask for this hash instead of the one in the markers
  x-script-always: 1        call shrink_retrieve in every round (the round limit)
  x-script-both: 1          call the client's first tool beside ours; after the retrieval,
                            call the client's tool alone (the model re-issues it)
  x-script-fail-round: N    answer continuation round N (1 = the first) with a 500
  x-script-hang-round: N    hold continuation round N until the proxy goes away
  x-script-delay: 0.05      wait before answering the first round (the store's TTL runs)
  x-script-chunk-delay: s   pause between SSE chunks
  x-script-cached: N        report N cached prompt tokens in every round
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.server import serve
from tests.fakes.upstream import Recorded, recorded

NAME = "shrink_retrieve"
HASH = re.compile(r"Retrieve more: hash=([0-9a-f]{24})")
COMPLETION_TOKENS = 7


@dataclass
class Step:
    """What the model does this round: text, then tool calls (name, arguments)."""

    text: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("function", {}).get("name") for t in body.get("tools") or []]


def rounds_served(messages: list[dict[str, Any]]) -> int:
    """Continuations so far: the assistant messages that called our tool."""
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        and any(c["function"]["name"] == NAME for c in m.get("tool_calls") or [])
    )


def decide(body: dict[str, Any], h: Any) -> Step:
    messages = body.get("messages") or []
    names = tool_names(body)
    served = rounds_served(messages)
    last = messages[-1] if messages else {}
    client_tool = next((n for n in names if n != NAME), None)
    text = "\n".join(str(m.get("content") or "") for m in messages)
    wanted = h.get("x-script-hash") or next(iter(HASH.findall(text)), None)
    if NAME in names and wanted and (served == 0 or h.get("x-script-always")):
        calls = [(NAME, {"hash": wanted})]
        if h.get("x-script-both") and client_tool:
            calls.insert(0, (client_tool, {"cmd": "ls"}))
        return Step("Looking. ", calls)
    if last.get("role") == "tool" and served:
        if h.get("x-script-both") and client_tool:
            return Step("", [(client_tool, {"cmd": "ls"})])
        quote = " | ".join(str(last.get("content") or "").splitlines()[:2])
        return Step(f"I read: {quote}")
    return Step("Plain answer.")


@dataclass
class Scripted:
    """What the scripted upstreams of every format share: the requests they got, and how a
    continuation round is steered by headers (fail, hang until the proxy goes, a first round
    that waits)."""

    url: str = ""  # where it runs, once `running`
    requests: list[Recorded] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> Starlette:
        raise NotImplementedError

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
        self.cancelled.clear()

    async def record(self, request: Request) -> Recorded:
        rec = await recorded(request)
        with self.lock:
            self.requests.append(rec)
        return rec

    async def steered(
        self, request: Request, served: int, failure: dict[str, Any]
    ) -> Response | None:
        """The answer the headers ask for instead of the model's (`failure`: the format's
        error body, sent with a 500), or None."""
        h = request.headers
        if served and h.get("x-script-fail-round") == str(served):
            return JSONResponse(failure, status_code=500)
        if served and h.get("x-script-hang-round") == str(served):
            while (await request.receive())["type"] != "http.disconnect":
                pass
            self.cancelled.set()
            return Response(status_code=499)
        if not served and h.get("x-script-delay"):
            await asyncio.sleep(float(h["x-script-delay"]))
        return None


FAILURE = {"error": {"message": "scripted failure", "type": "server_error", "code": "boom"}}


@dataclass
class FakeRetriever(Scripted):
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        rec = await self.record(request)
        body = orjson.loads(rec.body)
        h = request.headers
        served = rounds_served(body.get("messages") or [])
        if (early := await self.steered(request, served, FAILURE)) is not None:
            return early
        step = decide(body, h)
        usage: dict[str, Any] = {
            "prompt_tokens": len(rec.body) // 4,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": len(rec.body) // 4 + COMPLETION_TOKENS,
        }
        if h.get("x-script-cached"):
            usage["prompt_tokens_details"] = {"cached_tokens": int(h["x-script-cached"])}
        rid = f"chatcmpl-round{served}"
        calls = [
            {
                "id": f"call_{served}_{i}",
                "type": "function",
                "function": {"name": n, "arguments": orjson.dumps(a).decode()},
            }
            for i, (n, a) in enumerate(step.calls)
        ]
        finish = "tool_calls" if calls else "stop"
        if body.get("stream"):
            include = (body.get("stream_options") or {}).get("include_usage")
            delay = float(h.get("x-script-chunk-delay", "0"))
            events = sse(rid, step.text, calls, finish, usage if include else None)
            return StreamingResponse(paced(events, delay), media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if calls:
            message["tool_calls"] = calls
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": 1000 + served,
                "model": body.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )


def sse(
    rid: str, text: str, calls: list[dict[str, Any]], finish: str, usage: dict[str, Any] | None
) -> list[bytes]:
    """A stream as OpenAI sends one: role first, text in pieces, each call's id and name, then
    its arguments in two pieces, the finish, the usage chunk, [DONE]."""

    def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None, **more: Any) -> bytes:
        choices = (
            [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        )
        obj = {"id": rid, "object": "chat.completion.chunk", "created": 1, "model": "m"}
        return b"data: " + orjson.dumps({**obj, "choices": choices, **more}) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in re.findall(r"\S+\s*", text)]
    for i, c in enumerate(calls):
        fn = c["function"]
        head = {"index": i, "id": c["id"], "type": "function", "function": {"name": fn["name"]}}
        out.append(
            chunk({"tool_calls": [{**head, "function": {**head["function"], "arguments": ""}}]})
        )
        half = len(fn["arguments"]) // 2
        for piece in (fn["arguments"][:half], fn["arguments"][half:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    out.append(chunk({}, finish))
    if usage is not None:
        out.append(chunk(None, usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out


async def paced(events: list[bytes], delay: float):
    for e in events:
        yield e
        if delay:
            await asyncio.sleep(delay)


S = TypeVar("S", bound=Scripted)


@contextmanager
def running(fake: S) -> Iterator[S]:
    """The scripted upstream under uvicorn on 127.0.0.1 (its `url` set) while the block runs."""
    with serve(fake.app()) as url:
        fake.url = url
        yield fake


@contextmanager
def proxies(upstream: str, client: Callable[[str], Any]) -> Iterator[Callable[..., Any]]:
    """start(**settings) -> `client(url)` of a proxy in front of `upstream`, each proxy under
    uvicorn on 127.0.0.1; all closed when the block ends."""
    with ExitStack() as stack:

        def start(**overrides: Any) -> Any:
            overrides.setdefault("upstream_url", upstream + "/v1")
            overrides.setdefault("discover_window", False)
            overrides.setdefault("tool_max_tokens", 256)
            url = stack.enter_context(serve(create_app(Settings(**overrides))))
            return stack.enter_context(client(url))

        yield start
