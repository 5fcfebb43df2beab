"""The app's metrics: its own Prometheus registry plus the bounded usage history of the dashboard.

One `Metrics` per app, built by the lifespan and kept on `AppState`. It owns a private
`CollectorRegistry` (never prometheus_client's global default: two apps in one process, as in the
tests, would collide, and nothing outside the app should be able to add series to it).

Label values that clients control are bounded (`proxy.collectors.LabelBound`): the first
`max_models` distinct model names keep their name and later ones are counted as "other"; request
ids and paths are never labels (ids appear only in the in-memory ring of recent requests, see
`proxy.usage`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from proxy.collectors import OTHER, UNKNOWN, CacheInfoFn, LabelBound, ScrapeCollector
from proxy.usage import RequestRecord, Usage, short_id

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from proxy.pipeline.types import Report

log = logging.getLogger(__name__)

KNOWN_STAGES = ("tools", "trim", "truncate", "user_cut", "summary", "work_budget")
# LLM requests run from milliseconds (a cached /v1/models) to minutes (a long generation).
SLOW_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
# The pipeline's own cost: well under a millisecond for small requests, ~100 ms for huge ones.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    """Counters, histograms and gauges of one app, plus the dashboard's usage history."""

    def __init__(
        self,
        *,
        max_models: int = 32,
        recent_size: int = 200,
        series_minutes: int = 24 * 60,
        clock: Callable[[], float] = time.time,
        process_metrics: bool = True,
    ) -> None:
        self.registry = r = CollectorRegistry()
        self.clock = clock
        self.started_at = clock()
        self.model_label = LabelBound(max_models)
        self.route_label = LabelBound(16)
        self.stage_label = LabelBound(16)
        self.code_label = LabelBound(64)
        self.outcome_label = LabelBound(16)
        self.usage = Usage(recent_size=recent_size, series_minutes=series_minutes)
        self.windows: dict[str, int] = {}  # set_window: configured or learnt
        self.window_sources: list[Callable[[], Mapping[str, int]]] = []
        self.summaries: dict[str, list[float]] = {}  # outcome -> [calls, seconds]
        self.lock = threading.Lock()
        self.active = 0
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def histogram(name: str, doc: str, label: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, [label], buckets=buckets, registry=r)

        self.requests = counter(
            "shrink_requests",
            "Requests handled, by route, HTTP status sent to the client and model.",
            "route",
            "status",
            "model",
        )
        self.duration = histogram(
            "shrink_request_duration_seconds",
            "From request arrival to the last byte relayed (or the error), by route.",
            "route",
            SLOW_BUCKETS,
        )
        self.ttfb = histogram(
            "shrink_upstream_ttfb_seconds",
            "From request arrival to the upstream's response headers, by route.",
            "route",
            SLOW_BUCKETS,
        )
        self.pipeline = histogram(
            "shrink_pipeline_duration_seconds",
            "Time spent shrinking (counting, compacting, trimming) before the upstream call.",
            "route",
            FAST_BUCKETS,
        )
        self.tokens_before = counter(
            "shrink_tokens_before",
            "Prompt tokens as clients sent them (requests that reached the upstream), by model.",
            "model",
        )
        self.tokens_after = counter(
            "shrink_tokens_after", "Prompt tokens sent upstream after shrinking, by model.", "model"
        )
        self.tokens_saved = counter(
            "shrink_tokens_saved",
            "Prompt tokens removed by shrinking (before minus after), by model.",
            "model",
        )
        self.upstream_tokens = counter(
            "shrink_upstream_prompt_tokens",
            "Prompt tokens as the upstream counted them (its usage report, when it sent one).",
            "model",
        )
        self.actions = counter(
            "shrink_actions",
            "Pipeline actions by stage: tool results compacted, messages trimmed, texts truncated.",
            "stage",
        )
        self.stage_saved = counter(
            "shrink_stage_tokens_saved",
            "Tokens removed by each stage, as the stage measured them.",
            "stage",
        )
        self.summarizer_calls = counter(
            "shrink_summarizer_calls",
            "Summarizer calls by outcome (ok, cached, error, timeout, ...).",
            "outcome",
        )
        self.summarizer_duration = histogram(
            "shrink_summarizer_duration_seconds",
            "Summarizer call latency by outcome.",
            "outcome",
            SLOW_BUCKETS,
        )
        self.in_flight = Gauge(
            "shrink_requests_in_flight",
            "Requests being handled, responses still streaming included.",
            registry=r,
        )
        self.disconnects = counter(
            "shrink_client_disconnects",
            "Requests whose client left before the response ended, by route.",
            "route",
        )
        self.errors = counter(
            "shrink_errors",
            "Requests that ended in an error the proxy raised or met, by route and error code.",
            "route",
            "code",
        )
        self.upstream_errors = counter(
            "shrink_upstream_errors",
            "Upstream failures by route and code: the proxy's error code (upstream_unavailable, "
            "upstream_timeout, ...) or the upstream's HTTP status for its 4xx/5xx answers.",
            "route",
            "code",
        )
        self.heap_trims = Counter(
            "shrink_heap_trims",
            "Times freed heap memory was handed back to the OS after large request bodies "
            "(SHRINK_HEAP_TRIM_INTERVAL).",
            registry=r,
        )
        self.count_ahead = Counter(
            "shrink_count_ahead_helpers",
            "Cold requests whose long tool results a helper thread counted on a spare core while "
            "the pipeline read them.",
            registry=r,
        )
        self.pipeline_errors = counter(
            "shrink_pipeline_errors",
            "Requests the pipeline raised on while planning, by what they fell back to: 'trim' "
            "(stage 2's cut and plain head+tail cuts only) or 'unchanged' (sent as received).",
            "fallback",
        )
        for fallback in ("trim", "unchanged"):
            self.pipeline_errors.labels(fallback)
        self.plans = counter(
            "shrink_plans",
            "Chat requests by where they were planned: 'inline' (on the event loop: cheap), "
            "'thread', 'process' (a planner process: a big body), or 'overloaded' (refused with "
            "503: SHRINK_MAX_QUEUED_BYTES of bodies were already waiting).",
            "where",
        )
        for where in ("inline", "thread", "process", "overloaded"):
            self.plans.labels(where)
        self.scraped = ScrapeCollector(self.window_values)
        r.register(self.scraped)
        for stage in KNOWN_STAGES:  # so that rate() sees the series before the first action
            self.actions.labels(self.stage_label(stage))
            self.stage_saved.labels(self.stage_label(stage))

    # --- observations --------------------------------------------------------------------------

    def observe_request(
        self,
        route: str,
        *,
        status: int,
        duration_s: float,
        model: object = None,
        ttfb_s: float | None = None,
        shrink_s: float | None = None,
        report: Report | None = None,
        sent: bool = True,
        request_id: object = None,
        mode: str | None = None,
        error: str | None = None,
        upstream_error: str | None = None,
        client_disconnected: bool = False,
        upstream_prompt_tokens: int | None = None,
    ) -> None:
        """One finished request. Call it exactly once per request, when the relay has ended.

        `sent` is False when the prompt never reached the upstream (rejected as too large, the
        upstream unreachable): the request and its report appear in the recent list, but its
        tokens are not added to the totals, since nothing was sent or saved.
        `upstream_prompt_tokens` is the upstream's own count from its usage report, if any.
        """
        route_l = self.route_label(route)
        model_l = self.model_label(model) if model is not None else UNKNOWN
        self.requests.labels(route_l, str(status), model_l).inc()
        self.duration.labels(route_l).observe(duration_s)
        if ttfb_s is not None:
            self.ttfb.labels(route_l).observe(ttfb_s)
        if shrink_s is not None:
            self.pipeline.labels(route_l).observe(shrink_s)
        if client_disconnected:
            self.disconnects.labels(route_l).inc()
        if upstream_prompt_tokens is not None:
            self.upstream_tokens.labels(model_l).inc(upstream_prompt_tokens)
        if error:
            self.errors.labels(route_l, self.code_label(error)).inc()
        if upstream_error:
            self.upstream_errors.labels(route_l, self.code_label(upstream_error)).inc()
        counted = report is not None and sent
        saved = 0
        stage_saved: dict[str, int] = {}
        actions: dict[str, int] = {}
        if report is not None:
            for detail in report.details:
                stage = self.stage_label(detail.stage)
                cut = max(detail.tokens_before - detail.tokens_after, 0)
                stage_saved[stage] = stage_saved.get(stage, 0) + cut
            for stage, n in report.actions.items():
                label = self.stage_label(stage)
                actions[label] = actions.get(label, 0) + n
        if report is not None and sent:
            saved = max(report.tokens_before - report.tokens_after, 0)
            self.tokens_before.labels(model_l).inc(report.tokens_before)
            self.tokens_after.labels(model_l).inc(report.tokens_after)
            self.tokens_saved.labels(model_l).inc(saved)
            for stage, n in actions.items():
                self.actions.labels(stage).inc(n)
            for stage, n in stage_saved.items():
                self.stage_saved.labels(stage).inc(n)
        self.usage.record(
            RequestRecord(
                ts=self.clock(),
                request_id=short_id(request_id),
                route=route_l,
                model=model_l,
                mode=mode,
                status=status,
                tokens_before=report.tokens_before if report else None,
                tokens_after=report.tokens_after if report else None,
                saved=saved,
                upstream_tokens=upstream_prompt_tokens,
                actions=actions,
                duration_ms=round(duration_s * 1000, 2),
                ttfb_ms=round(ttfb_s * 1000, 2) if ttfb_s is not None else None,
                error=error or upstream_error,
                client_disconnected=client_disconnected,
            ),
            counted=counted,
            stage_saved=stage_saved,
        )

    def request_started(self) -> None:
        with self.lock:
            self.active += 1
        self.in_flight.inc()

    def request_ended(self) -> None:
        with self.lock:
            self.active -= 1
        self.in_flight.dec()

    def observe_summary(self, outcome: str, latency_s: float | None = None) -> None:
        """One summarizer call; `latency_s` None for outcomes without a model call (cached)."""
        label = self.outcome_label(outcome)
        self.summarizer_calls.labels(label).inc()
        if latency_s is not None:
            self.summarizer_duration.labels(label).observe(latency_s)
        with self.lock:
            entry = self.summaries.setdefault(label, [0, 0.0])
            entry[0] += 1
            entry[1] += latency_s or 0.0

    def observe_plan(self, where: str) -> None:
        self.plans.labels(where).inc()

    def observe_pipeline_error(self, fallback: str) -> None:
        """The pipeline raised on a request, which was then planned by `fallback`."""
        self.pipeline_errors.labels(fallback).inc()

    def set_window(self, model: str, tokens: int) -> None:
        """A window known for a model (configured, or learnt from an overflow error)."""
        label = self.model_label(model)
        if label in (OTHER, UNKNOWN):
            return
        with self.lock:
            self.windows[label] = tokens

    def watch_windows(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Windows by model read when needed (e.g. `WindowDiscovery.snapshot`); they win over
        `set_window` values for the same model."""
        self.window_sources.append(source)

    def window_values(self) -> dict[str, int]:
        with self.lock:
            out = dict(self.windows)
        for source in self.window_sources:
            try:
                found = dict(source())
            except Exception:  # a broken source must not break a scrape or the dashboard
                log.exception("window source failed")
                continue
            for model, tokens in found.items():
                label = self.model_label(model)
                if label not in (OTHER, UNKNOWN):
                    out[label] = tokens
        return out

    def watch_cache(self, name: str, info: CacheInfoFn) -> None:
        """Export a cache's cumulative `(hits, misses, size)`, read at scrape time."""
        self.scraped.sources[name] = info

    # --- output --------------------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """Prometheus text exposition of this app's registry, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def stats(self, *, recent: int = 50, minutes: int = 24 * 60) -> dict[str, Any]:
        """The JSON served at /stats: totals, by model, by stage, series, recent requests."""
        now = self.clock()
        snap = self.usage.snapshot(now, recent=recent, minutes=minutes)
        windows = self.window_values()
        with self.lock:
            summaries = {
                k: {"calls": int(n), "avg_latency_s": round(t / n, 4) if n else None}
                for k, (n, t) in self.summaries.items()
            }
        for row in snap["by_model"]:
            row["window"] = windows.get(row["model"])
        snap["totals"]["in_flight"] = self.active
        return {
            "started_at": self.started_at,
            "now": now,
            "uptime_s": round(now - self.started_at, 1),
            **snap,
            "windows": windows,
            "summarizer": summaries,
            "caches": {
                name: {
                    "hits": h,
                    "misses": m,
                    "entries": s,
                    "hit_rate": round(h / (h + m), 4) if h + m else None,
                }
                for name, (h, m, s) in self.scraped.read_caches().items()
            },
        }


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
