"""Shared by the observability tests: a small app around the metrics router, and fake traffic.

The app stands in for the proxy's own (an `app.state.shrink`-like object holding a `Metrics`),
so these tests depend only on the router's explicit dependencies.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request

from proxy.dashboard import build_router, no_auth
from proxy.errors import Unauthorized, install_handlers
from proxy.metrics import Metrics
from proxy.pipeline.types import Report, StageAction

KEY = "s3cret-key"
MODELS = ["qwen2.5-coder:32b", "llama3.1:8b-instruct", "gpt-4o-mini"]


class OffsetClock:
    """Wall-clock time minus `offset` seconds, so traffic can be recorded "in the past"."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() - self.offset


@dataclass
class State:
    metrics: Metrics


def require_key(request: Request) -> None:
    if request.headers.get("authorization") != f"Bearer {KEY}":
        raise Unauthorized("Missing or wrong key for shrink-proxy.")


def build_app(metrics: Metrics, check_auth: Callable[[Request], None] = no_auth) -> FastAPI:
    app = FastAPI()
    install_handlers(app)
    app.state.shrink = State(metrics)
    app.include_router(build_router(lambda request: request.app.state.shrink.metrics, check_auth))
    return app


def record_traffic(metrics: Metrics, clock: OffsetClock, n: int, span_s: float = 3000) -> int:
    """Record `n` plausible chat requests spread over the last `span_s` seconds; returns saved."""
    rng = random.Random(n)
    saved = 0
    for i in range(n):
        clock.offset = span_s * (n - 1 - i) / max(n - 1, 1)
        before = rng.randrange(2_000, 60_000)
        r = Report(tokens_before=before, budget=28_000, window=32_768)
        after = before
        if rng.random() < 0.7:
            cut = int(before * rng.uniform(0.2, 0.5))
            r.count("tools", rng.randrange(1, 5))
            r.details.append(StageAction("tools", 3, "tool result compacted", cut + 400, 400))
            after -= cut
        if after > 28_000:
            dropped = after - rng.randrange(18_000, 27_000)
            r.count("trim", rng.randrange(4, 30))
            r.details.append(StageAction("trim", 1, "old messages omitted", dropped, 0))
            after -= dropped
        r.tokens_after = after
        saved += before - after
        status = 200 if i % 11 else 502
        metrics.observe_request(
            "chat",
            status=status,
            duration_s=rng.uniform(0.4, 9.0),
            ttfb_s=rng.uniform(0.05, 1.5),
            shrink_s=rng.uniform(0.0005, 0.02),
            model=MODELS[i % len(MODELS)],
            report=r,
            request_id=f"req-{i:04d}-{rng.getrandbits(32):08x}",
            mode="auto",
            upstream_error=None if status == 200 else "502",
        )
    clock.offset = 0
    return saved
