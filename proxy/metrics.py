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

from proxy.collectors import (
    FAST_BUCKETS,
    KNOWN_STAGES,
    NO_MODEL,
    OTHER,
    SLOW_BUCKETS,
    UNKNOWN,
    CacheInfoFn,
    LabelBound,
    ScrapeCollector,
    SummarizerView,
)
from proxy.cuts import CutTracker
from proxy.usage import RequestRecord, Usage, short_id, short_path

if TYPE_CHECKING:
    from proxy.pipeline.types import Report

log = logging.getLogger(__name__)


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
        self.cuts = CutTracker()
        self.cut_moves_total = 0
        self.calibration_changes_total = 0
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
        self.fitting_before = counter(
            "shrink_fitting_tokens_before",
            "Prompt tokens as clients sent them, of requests whose prompt already fit its budget "
            "(the backend could have taken them unshrunk), by model.",
            "model",
        )
        self.fitting_saved = counter(
            "shrink_fitting_tokens_saved",
            "Prompt tokens removed from requests whose prompt already fit its budget, by model.",
            "model",
        )
        self.cache_prompt = counter(
            "shrink_upstream_cache_prompt_tokens",
            "Prompt tokens of the requests whose upstream reported its prefix cache "
            "(usage.prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens, "
            "or llama.cpp's cache_n + prompt_n).",
            "model",
        )
        self.cache_hit = counter(
            "shrink_upstream_cached_tokens",
            "Of those, the prompt tokens the upstream served from its prefix cache (cached_tokens "
            "or llama.cpp's cache_n); over shrink_upstream_cache_prompt_tokens: prefix reuse.",
            "model",
        )
        self.cache_reports = counter(
            "shrink_upstream_cache_reports",
            "Requests whose upstream reported its prefix cache, by model.",
            "model",
        )
        self.cut_moves = counter(
            "shrink_cut_moves",
            "Requests whose trim cut (where the kept history starts) differs from the previous "
            "request's of the same conversation: each one makes the backend rebuild its prefix "
            "cache from the cut on.",
            "model",
        )
        self.calibration_changes = counter(
            "shrink_calibration_changes",
            "Changes of the token-count ratio the planner applies to a model's window (its "
            "counts against the backend's): each one changes budgets, and can move cuts.",
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
            "Requests that wanted a summary, by outcome: model (made while it waited), joined "
            "(waited on a call another request started), cache (a summary made before, reused), "
            "timeout (stopped waiting; the call goes on), deferred (not waited for: the "
            "summarizer is known to be slower than SHRINK_SUMMARY_TIMEOUT), error, empty.",
            "outcome",
        )
        self.summarizer_duration = histogram(
            "shrink_summarizer_duration_seconds",
            "How long requests waited for their summary, by outcome.",
            "outcome",
            SLOW_BUCKETS,
        )
        self.summaries_made = counter(
            "shrink_summaries_made",
            "Summarizer model calls that ended, by result (ok, error, empty), whether or not a "
            "request still waited for them: one per span, however many requests wanted it.",
            "result",
        )
        self.summary_call_duration = histogram(
            "shrink_summary_call_duration_seconds",
            "How long summarizer model calls took, by result (ok, error, empty).",
            "result",
            SLOW_BUCKETS,
        )
        self.summaries_in_flight = Gauge(
            "shrink_summaries_in_flight",
            "Summarizer model calls in flight, those no request waits for any more included.",
            registry=r,
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
        self.retrieve_rounds = counter("shrink_retrieve_rounds", "shrink_retrieve rounds served.")
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
        prefix_reuse: tuple[int, int] | None = None,
        path: str | None = None,
        cut: tuple[bytes, int] | None = None,
    ) -> None:
        """One finished request. Call it exactly once per request, when the relay has ended.

        `sent` is False when the prompt never reached the upstream (rejected as too large, the
        upstream unreachable): the request and its report appear in the recent list, but its
        tokens are not added to the totals, since nothing was sent or saved.
        `upstream_prompt_tokens` is the upstream's own count from its usage report, if any;
        `prefix_reuse` its (prompt, cached) tokens when it reported its prefix cache; `cut` the
        request's (conversation root, trim cut), see `proxy.cuts`.
        """
        route_l = self.route_label(route)
        model_l = self.model_label(model) if model is not None else NO_MODEL
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
        if prefix_reuse is not None:
            self.cache_reports.labels(model_l).inc()
            self.cache_prompt.labels(model_l).inc(prefix_reuse[0])
            self.cache_hit.labels(model_l).inc(prefix_reuse[1])
        if cut is not None and sent and self.cuts.moved(*cut):
            self.cut_moves.labels(model_l).inc()
            with self.lock:
                self.cut_moves_total += 1
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
                removed = max(detail.tokens_before - detail.tokens_after, 0)
                stage_saved[stage] = stage_saved.get(stage, 0) + removed
            for stage, n in report.actions.items():
                label = self.stage_label(stage)
                actions[label] = actions.get(label, 0) + n
        # The client's prompt fit its budget as sent: the backend could have taken it unshrunk.
        fit_as_sent = report.tokens_before <= report.budget if report is not None else None
        if report is not None and sent:
            saved = max(report.tokens_before - report.tokens_after, 0)
            self.tokens_before.labels(model_l).inc(report.tokens_before)
            self.tokens_after.labels(model_l).inc(report.tokens_after)
            self.tokens_saved.labels(model_l).inc(saved)
            if fit_as_sent:
                self.fitting_before.labels(model_l).inc(report.tokens_before)
                self.fitting_saved.labels(model_l).inc(saved)
            for stage, n in actions.items():
                self.actions.labels(stage).inc(n)
            for stage, n in stage_saved.items():
                self.stage_saved.labels(stage).inc(n)
        self.usage.record(
            RequestRecord(
                ts=self.clock(),
                request_id=short_id(request_id),
                route=route_l,
                model=model_l if model is not None else None,
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
                path=short_path(path),
                fit_as_sent=fit_as_sent,
                prefix_reuse=prefix_reuse,
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

    def observe_calibration_change(self, model: str) -> None:
        """The calibration ratio applied to `model` changed (see `proxy.windows.calibrate`)."""
        self.calibration_changes.labels(self.model_label(model)).inc()
        with self.lock:
            self.calibration_changes_total += 1

    def observe_summary_made(self, result: str, seconds: float) -> None:
        """One summarizer model call ended (the summarizer's `on_made`)."""
        label = self.outcome_label(result)
        self.summaries_made.labels(label).inc()
        self.summary_call_duration.labels(label).observe(seconds)

    def watch_summarizer(self, summarizer: SummarizerView) -> None:
        """Calls in flight and the summary cache's counts, read at scrape time."""
        self.summaries_in_flight.set_function(lambda: summarizer.pending)
        self.watch_cache("summaries", summarizer.cache.info)

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
        snap["totals"]["cut_moves"] = self.cut_moves_total
        snap["totals"]["calibration_changes"] = self.calibration_changes_total
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
