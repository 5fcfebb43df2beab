"""A recording pass-through between the proxy and the real llama.cpp server.

The fakes record what reached them; a real backend does not say what it was sent. This tap
forwards every request unchanged (body, query, end-to-end headers) and relays the answer as it
arrives, byte for byte with its status, `content-length` and `content-type`, while keeping a copy
of both, so tests can assert on what the proxy really sent to llama.cpp and what came back.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
}


@dataclass
class Exchange:
    method: str
    path: str
    body: bytes
    status: int = 0
    response: bytes = b""

    def json(self) -> Any:
        return orjson.loads(self.body)

    def answer(self) -> Any:
        return orjson.loads(self.response)


@dataclass
class Tap:
    target: str  # llama.cpp's base URL, without /v1
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def chats(self) -> list[Exchange]:
        """The chat completion requests, in the order they arrived."""
        with self.lock:
            return [e for e in self.exchanges if e.path == "/v1/chat/completions"]

    def paths(self) -> list[str]:
        with self.lock:
            return [f"{e.method} {e.path}" for e in self.exchanges]

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
                app.state.client = client
                yield

        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        return Starlette(
            routes=[Route("/{path:path}", self.forward, methods=methods)], lifespan=lifespan
        )

    async def forward(self, request: Request) -> StreamingResponse:
        client: httpx.AsyncClient = request.app.state.client
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        upstream = await client.send(
            client.build_request(
                request.method,
                self.target + request.url.path,
                params=request.url.query,
                content=body,
                headers=headers,
            ),
            stream=True,
        )
        record = Exchange(request.method, request.url.path, body, upstream.status_code)
        with self.lock:
            self.exchanges.append(record)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    record.response += chunk
                    yield chunk
            finally:
                await upstream.aclose()

        kept = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=kept)
