"""A fake summarizer model: an OpenAI-compatible `/v1/chat/completions` that records prompts.

Serve it with `tests.fakes.server.serve(fake.app())`. Behaviour is steered by attributes set by
the test (the server runs in another thread; plain attribute writes are enough):

  delay     seconds to wait before answering
  status    answer with this status and an OpenAI-shaped error body (200: normal)
  garbage   bytes sent verbatim as a 200 body instead of a chat completion
  content   exact `message.content` to return instead of the deterministic summary

The deterministic summary keeps the first line of every transcript entry (`role: ...`,
`-> tool(...)`, `<- ...`), after the lines of the previous note when one is given, so tests can
tell exactly what the summarizer was shown.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

_ENTRY = re.compile(r"^(?:[a-z]+: |-> |<- )")


def _between(text: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.S)
    return m.group(1) if m else None


def deterministic_summary(prompt: str) -> str:
    """First line of each transcript entry, after the previous note's lines if any."""
    lines: list[str] = []
    previous = _between(prompt, "previous_note")
    if previous is not None:
        lines += previous.splitlines()
    transcript = _between(prompt, "transcript") or ""
    lines += [line for line in transcript.splitlines() if _ENTRY.match(line)]
    return "\n".join(lines)


@dataclass
class FakeSummarizer:
    delay: float = 0.0
    status: int = 200
    garbage: bytes | None = None
    content: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def reset(self) -> None:
        with self.lock:
            self.delay, self.status, self.garbage, self.content = 0.0, 200, None, None
            self.requests.clear()
            self.headers.clear()

    @property
    def prompts(self) -> list[str]:
        """The user prompt of every request received, in order."""
        return [r["messages"][-1]["content"] for r in self.requests]

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        with self.lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            error = {"message": "fake summarizer error", "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=self.status)
        if self.garbage is not None:
            return Response(self.garbage, media_type="application/json")
        prompt = body["messages"][-1]["content"]
        text = self.content if self.content is not None else deterministic_summary(prompt)
        return JSONResponse(
            {
                "id": "chatcmpl-summary",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4},
            }
        )
