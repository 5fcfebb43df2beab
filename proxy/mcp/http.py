"""`/mcp` on the running proxy: the same MCP tools over Streamable HTTP.

Boundary: an ASGI endpoint and the context its session manager runs in (entered by the app's
lifespan). Every request first passes the proxy's inbound key check (`SHRINK_PROXY_API_KEY`),
as `/v1` does. The tools reuse the app's own engine (tokenizers, shrinker, summarizer) with a
store of their own. Command execution is remote code execution here, so `run_compact_command`
is offered only with `SHRINK_MCP_HTTP_EXEC=true`.

The MCP SDK is an optional extra: without it the proxy serves as ever, and `/mcp` answers 404
saying what to install. Nothing here imports the SDK before the first `/mcp` request (it holds
~25 MB a proxy that never serves MCP should not pay), and nothing runs after the app's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ipaddress
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from proxy.errors import NotFound
from proxy.mcp.stdio import MISSING
from proxy.settings import Settings

if TYPE_CHECKING:
    from proxy.app import AppState
    from proxy.mcp.server import Engine

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def sdk_installed() -> bool:
    return importlib.util.find_spec("mcp") is not None


class McpEndpoint:
    """The ASGI endpoint of `/mcp`. `state_of(request)`: the app's AppState (routes.state_of);
    `authorize(request, state)`: the inbound key check (routes.authorize)."""

    def __init__(
        self,
        settings: Settings,
        state_of: Callable[[Request], AppState],
        authorize: Callable[[Request, AppState], None],
    ) -> None:
        self.settings = settings
        self.state_of = state_of
        self.authorize = authorize
        self.manager: Any = None
        self._engine: Engine | None = None
        self._state: AppState | None = None
        self._stop: asyncio.Event | None = None  # set while the lifespan runs
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def _build(self) -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        from proxy.mcp.server import build_server

        server = build_server(self.engine, allow_exec=self.settings.mcp_http_exec)
        # A browser page must not reach a loopback-bound proxy through DNS rebinding: on
        # loopback only loopback Host and Origin headers pass. A public bind has its key.
        security = (
            TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=LOOPBACK_HOSTS,
                allowed_origins=LOOPBACK_ORIGINS,
            )
            if _loopback(self.settings.host)
            else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        # Worker processes share no sessions: each request then stands alone (stateless).
        server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=security,
            stateless_http=self.settings.workers > 1,
        )
        return server.session_manager

    def engine(self) -> Engine:
        """The tools' engine, built on first use from the app's state (made by the lifespan)."""
        if self._engine is None:
            from proxy.mcp.context import Context
            from proxy.mcp.server import Engine, build_store

            state = self._state
            assert state is not None, "the lifespan has not run"
            context = Context(state.settings, state.shrinker, state.tokenizers, state.summarizer)
            store = build_store(state.settings)
            self._engine = Engine(state.settings, store, context, refs=state.retrieval)
        return self._engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state = self.state_of(request)
        self.authorize(request, state)
        if not sdk_installed():
            raise NotFound(f"/mcp is not served: {MISSING}")
        self._state = state
        manager = await self._started()
        if manager is None:
            raise NotFound("/mcp is not served: the proxy is not running (or stopping)")
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> Any:
        """The session manager, started by the first request in a task the lifespan ends."""
        async with self._lock:
            if self.manager is None and self._stop is not None and not self._stop.is_set():
                manager = self._build()
                ready = asyncio.Event()
                task = asyncio.create_task(self._serve(manager, ready, self._stop))
                waiter = asyncio.create_task(ready.wait())
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if task.done():
                    task.result()  # it failed to start: raise its error (a 500 for this request)
                    return None
                self._task, self.manager = task, manager
        return self.manager

    @staticmethod
    async def _serve(manager: Any, ready: asyncio.Event, stop: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            await stop.wait()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the app's lifespan holds it, `/mcp` may start its session manager; on exit the
        manager (if one started) stops and the tools' store is closed."""
        self._stop = asyncio.Event()
        try:
            yield
        finally:
            self._stop.set()
            if self._task is not None:
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = self.manager = None
            if self._engine is not None:
                self._engine.context.close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
