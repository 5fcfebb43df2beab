"""Observability routes: `/metrics` (Prometheus), `/stats` (JSON) and `/dashboard` (one HTML page).

The router takes its dependencies as arguments (how to find the app's `Metrics`, how to check the
inbound key) instead of reaching into app state, so it can be mounted on any app and tested alone.

With an inbound key configured, all three routes require it like any other route. A browser cannot
add headers to a page it navigates to, so `/dashboard` also accepts `?key=K`; the page then sends
that key as `Authorization: Bearer K` when it polls `/stats`. The key is checked by the same
`check_auth` callback in both cases, never by this module.

The page is self-contained (inline CSS and JS, no CDN, works offline); its Content-Security-Policy
allows only its own inline code (by hash) and requests to this origin.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from importlib import resources

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from proxy import __version__
from proxy.metrics import Metrics

NO_STORE = {"cache-control": "no-store"}
MAX_RECENT = 200
MAX_MINUTES = 24 * 60


def no_auth(request: Request) -> None:
    """The default `check_auth`: every caller may read the metrics."""


def load_page() -> tuple[bytes, str]:
    """The dashboard HTML and a CSP that pins its inline script and style by hash."""
    html = resources.files("proxy").joinpath("static/dashboard.html").read_text("utf-8")
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, flags=re.S)
    csp = "; ".join(
        [
            "default-src 'none'",
            "script-src " + " ".join(sha256_source(s) for s in scripts),
            "style-src " + " ".join(sha256_source(s) for s in styles),
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return html.encode(), csp


def sha256_source(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return f"'sha256-{digest}'"


def with_query_key(request: Request) -> Request:
    """The request as `check_auth` should see it: `?key=K` becomes `Authorization: Bearer K`."""
    key = request.query_params.get("key")
    if not key or request.headers.get("authorization"):
        return request
    headers = [*request.scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1"))]
    return Request({**request.scope, "headers": headers}, request.receive)


def bounded_int(raw: str | None, default: int, high: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return min(max(value, 0), high)


def build_router(
    get_metrics: Callable[[Request], Metrics],
    check_auth: Callable[[Request], None] = no_auth,
) -> APIRouter:
    """Routes for /metrics, /stats and /dashboard over the `Metrics` that `get_metrics` finds."""
    router = APIRouter()
    page, csp = load_page()
    page_headers = {
        **NO_STORE,
        "content-security-policy": csp,
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
    }

    @router.get("/metrics")
    async def metrics(request: Request) -> Response:
        check_auth(request)
        body, content_type = get_metrics(request).render()
        return Response(body, media_type=content_type, headers=NO_STORE)

    @router.get("/stats")
    async def stats(request: Request) -> Response:
        """Totals, savings by model and stage, a per-minute series and the recent requests.

        `?recent=N` (default 50, at most 200) and `?minutes=M` (default and at most 1440).
        """
        check_auth(request)
        data = get_metrics(request).stats(
            recent=bounded_int(request.query_params.get("recent"), 50, MAX_RECENT),
            minutes=bounded_int(request.query_params.get("minutes"), MAX_MINUTES, MAX_MINUTES),
        )
        data["version"] = __version__
        return Response(orjson.dumps(data), media_type="application/json", headers=NO_STORE)

    @router.get("/dashboard")
    async def dashboard(request: Request) -> Response:
        check_auth(with_query_key(request))
        return Response(page, media_type="text/html; charset=utf-8", headers=page_headers)

    return router
