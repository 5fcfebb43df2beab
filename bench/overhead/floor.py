"""The floor: the thinnest FastAPI pass-through on the proxy's HTTP stack, under the same uvicorn.

What any proxy built on FastAPI + httpx pays at least: read the body, one pooled client, `send(...,
stream=True)`, relay `aiter_raw()`. The proxy's overhead is read against this, not against zero.
`--transport aiohttp` swaps httpx's default transport for httpx-aiohttp's (issue 5: choose the
upstream transport by measurement); the httpx API above it is unchanged.

    python -m bench.overhead.floor --port 9001 --upstream http://127.0.0.1:9000 --transport aiohttp
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

# Hop-by-hop headers (RFC 9110 §7.6.1) plus those the client or server stack computes itself.
DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
        "proxy-authorization",
        "proxy-authenticate",
    }
)


def make_transport(name: str, max_connections: int) -> httpx.AsyncBaseTransport | None:
    """None means httpx's default (httpcore) transport."""
    if name == "httpx":
        return None
    if name == "aiohttp":
        import aiohttp
        from httpx_aiohttp import AiohttpTransport

        def session() -> aiohttp.ClientSession:
            # Created on first use, inside the running loop. Without skip_auto_headers aiohttp
            # adds Accept, Accept-Encoding: gzip, deflate and its User-Agent to every request,
            # which the proxy must not do (a compressed answer only for clients that asked).
            return aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max_connections),
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),
                trust_env=False,
            )

        return AiohttpTransport(client=session)
    raise ValueError(f"unknown transport {name!r}")


def create_app(upstream: str, transport: str, max_connections: int = 512) -> FastAPI:
    base = upstream.rstrip("/")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, read=None),
            limits=limits,
            transport=make_transport(transport, max_connections),
            trust_env=False,
        )
        client.headers.clear()
        app.state.client = client
        try:
            yield
        finally:
            await client.aclose()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    async def forward(request: Request, path: str) -> StreamingResponse:
        client: httpx.AsyncClient = request.app.state.client
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k not in DROP]
        req = client.build_request(
            request.method, f"{base}/v1/{path}", headers=headers, content=body or None
        )
        resp = await client.send(req, stream=True)
        out = {k: v for k, v in resp.headers.items() if k not in DROP - {"content-length"}}
        return StreamingResponse(
            resp.aiter_raw(),
            status_code=resp.status_code,
            headers=out,
            background=BackgroundTask(resp.aclose),
        )

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL without /v1")
    parser.add_argument("--transport", choices=["httpx", "aiohttp"], default="httpx")
    args = parser.parse_args()
    # The same uvicorn settings as `python -m proxy serve` (proxy/cli.py).
    uvicorn.run(
        create_app(args.upstream, args.transport),
        host="127.0.0.1",
        port=args.port,
        log_config=None,
        log_level="warning",
        server_header=False,
        access_log=False,
    )


if __name__ == "__main__":
    main()
