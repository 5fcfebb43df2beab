"""Counting requests in flight, from arrival until their response stream ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from proxy.metrics import Metrics


class InFlight:
    """ASGI middleware: counts proxied requests from arrival until their response stream ends.

    A middleware rather than calls in the handlers, because a request can end in many places
    (a 400 before any upstream call, a relay finishing after the handler returned) and `finally`
    here covers all of them. `get_metrics` finds the app's Metrics (None before the lifespan ran).
    """

    def __init__(
        self,
        app: ASGIApp,
        get_metrics: Callable[[Scope], Metrics | None],
        prefixes: tuple[str, ...] = ("/v1/", "/openai/"),
    ) -> None:
        self.app = app
        self.get_metrics = get_metrics
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics = None
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes):
            metrics = self.get_metrics(scope)
        if metrics is None:
            await self.app(scope, receive, send)
            return
        metrics.request_started()
        try:
            await self.app(scope, receive, send)
        finally:
            metrics.request_ended()
