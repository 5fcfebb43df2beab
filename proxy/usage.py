"""In-memory usage history for the dashboard: recent requests, a per-minute series, totals.

Prometheus keeps counters for scrapers; people looking at /dashboard or `shrink-proxy stats` want
"what did it save, lately, and on which requests", which needs a little history. Everything here
is bounded (a ring of recent requests, a day of one-minute buckets, per-model and per-stage totals
whose keys are already bounded by the caller) and holds no message content, ever: only ids,
model names, paths, token counts, actions, statuses, durations and timestamps.

Two savings figures are kept, because they answer different questions: all requests that reached
the backend (some of them it could never have taken as sent: shrinking is what made them
possible), and only those whose prompt already fit its budget as the client sent it (what
shrinking saved on requests that would have worked anyway). What backends report of their
prefix cache is kept per model and per minute, to show reuse over time.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

ID_MAX_CHARS = 64
PATH_MAX_CHARS = 64


@dataclass(frozen=True)
class RequestRecord:
    """One finished request as the dashboard shows it. `saved` is 0 when nothing was sent."""

    ts: float
    request_id: str | None
    route: str
    model: str | None  # None: the request named no model (a pass-through GET /v1/models)
    mode: str | None
    status: int
    tokens_before: int | None
    tokens_after: int | None
    saved: int
    upstream_tokens: int | None  # the upstream's own prompt count, from its usage report
    actions: dict[str, int]
    duration_ms: float
    ttfb_ms: float | None
    error: str | None
    client_disconnected: bool
    path: str | None = None  # pass-through requests: which endpoint
    fit_as_sent: bool | None = None  # the client's prompt already fit its budget
    # (prompt tokens, of which served from the backend's prefix cache), when it said
    prefix_reuse: tuple[int, int] | None = None


@dataclass
class Tally:
    """Token totals of a group of requests (all of them, one model)."""

    requests: int = 0
    shrunk: int = 0
    tokens_before: int = 0
    tokens_after: int = 0

    def add(self, before: int, after: int) -> None:
        self.requests += 1
        self.shrunk += after < before
        self.tokens_before += before
        self.tokens_after += after

    def as_dict(self) -> dict[str, Any]:
        saved = self.tokens_before - self.tokens_after
        return {
            **asdict(self),
            "tokens_saved": saved,
            "saved_pct": round(100 * saved / self.tokens_before, 2) if self.tokens_before else 0.0,
        }


@dataclass
class CacheTally:
    """What a backend reported of its prefix cache for one model."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, prompt: int, cached: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached

    def as_dict(self) -> dict[str, Any]:
        share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return {**asdict(self), "reuse_pct": round(100 * share, 2)}


@dataclass
class StageTally:
    actions: int = 0
    requests: int = 0
    tokens_saved: int = 0


@dataclass
class Usage:
    """The dashboard's memory. Thread-safe; callers pass already-bounded model/stage names."""

    recent_size: int = 200
    series_minutes: int = 24 * 60
    requests: int = 0
    errors: int = 0
    client_disconnects: int = 0
    tokens: Tally = field(default_factory=Tally)
    fitting: Tally = field(default_factory=Tally)  # requests whose prompt fit as sent
    by_model: dict[str, Tally] = field(default_factory=dict)
    by_api: dict[str, Tally] = field(default_factory=dict)  # by route: chat, anthropic, ...
    cache_by_model: dict[str, CacheTally] = field(default_factory=dict)
    by_stage: dict[str, StageTally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recent: deque[RequestRecord] = deque(maxlen=self.recent_size)
        # [minute start (epoch s), tokens before, tokens after, requests]; minutes without
        # traffic have no bucket, so the deque can span more than a day: `series` prunes by time.
        self.minutes: deque[list[int]] = deque(maxlen=self.series_minutes)
        # [minute start, {model: [prompt tokens, cached tokens]}] for requests that reported
        # their prefix cache; the models are the caller's bounded labels.
        self.cache_minutes: deque[tuple[int, dict[str, list[int]]]] = deque(
            maxlen=self.series_minutes
        )
        self.lock = threading.Lock()

    def record(
        self,
        rec: RequestRecord,
        *,
        counted: bool,
        stage_saved: dict[str, int],
    ) -> None:
        """Add one request; `counted` requests (their prompt reached the upstream) add tokens."""
        with self.lock:
            self.recent.append(rec)
            self.requests += 1
            # 499 (the client left) is counted apart: nothing went wrong on our side.
            self.errors += rec.status >= 400 and rec.status != 499
            self.client_disconnects += rec.client_disconnected
            minute = int(rec.ts // 60) * 60
            if rec.prefix_reuse is not None and rec.model is not None:
                prompt, cached = rec.prefix_reuse
                self.cache_by_model.setdefault(rec.model, CacheTally()).add(prompt, cached)
                if not self.cache_minutes or self.cache_minutes[-1][0] != minute:
                    self.cache_minutes.append((minute, {}))
                cell = self.cache_minutes[-1][1].setdefault(rec.model, [0, 0])
                cell[0] += prompt
                cell[1] += cached
            if not counted or rec.tokens_before is None or rec.tokens_after is None:
                return
            before, after = rec.tokens_before, rec.tokens_after
            self.tokens.add(before, after)
            if rec.fit_as_sent:
                self.fitting.add(before, after)
            self.by_model.setdefault(rec.model or "none", Tally()).add(before, after)
            self.by_api.setdefault(rec.route, Tally()).add(before, after)
            for stage, n in rec.actions.items():
                tally = self.by_stage.setdefault(stage, StageTally())
                tally.actions += n
                tally.requests += 1
                tally.tokens_saved += stage_saved.get(stage, 0)
            if self.minutes and self.minutes[-1][0] == minute:
                bucket = self.minutes[-1]
                bucket[1] += before
                bucket[2] += after
                bucket[3] += 1
            else:
                self.minutes.append([minute, before, after, 1])

    def snapshot(self, now: float, recent: int, minutes: int) -> dict[str, Any]:
        """A JSON-ready copy: totals, per-model and per-stage tallies, series, recent requests."""
        horizon = int(now // 60) * 60 - 60 * (max(minutes, 1) - 1)
        with self.lock:
            totals = {
                **self.tokens.as_dict(),
                "requests": self.requests,
                "counted_requests": self.tokens.requests,
                "errors": self.errors,
                "client_disconnects": self.client_disconnects,
                "fit_as_sent": self.fitting.as_dict(),
            }
            models = [{"model": m, **t.as_dict()} for m, t in self.by_model.items()]
            apis = [{"api": a, **t.as_dict()} for a, t in self.by_api.items()]
            stages = [{"stage": s, **asdict(t)} for s, t in self.by_stage.items()]
            points = [[ts, b, a, b - a, n] for ts, b, a, n in self.minutes if ts >= horizon]
            caches = [{"model": m, **t.as_dict()} for m, t in self.cache_by_model.items()]
            cache_series: dict[str, list[list[int]]] = {}
            for ts, cells in self.cache_minutes:
                if ts >= horizon:
                    for m, (p, c) in cells.items():
                        cache_series.setdefault(m, []).append([ts, p, c])
            ring = list(self.recent)
        rows = ring[-recent:] if recent > 0 else []
        models.sort(key=lambda m: (-m["tokens_saved"], m["model"]))
        stages.sort(key=lambda s: (-s["tokens_saved"], s["stage"]))
        caches.sort(key=lambda c: (-c["prompt_tokens"], c["model"]))
        return {
            "totals": totals,
            "by_model": models,
            "by_api": sorted(apis, key=lambda a: (-a["requests"], a["api"])),
            "by_stage": stages,
            "series": {
                "bucket_s": 60,
                "fields": ["ts", "tokens_before", "tokens_after", "tokens_saved", "requests"],
                "points": points,
            },
            "recent": [asdict(r) for r in reversed(rows)],
            "latency": latency_summary(ring),
            "prefix_cache": {
                "by_model": caches,
                "series": {
                    "bucket_s": 60,
                    "fields": ["ts", "prompt_tokens", "cached_tokens"],
                    "by_model": cache_series,
                },
            },
        }


def latency_summary(rows: list[RequestRecord]) -> dict[str, float | None]:
    """Median and 95th percentile of total duration and upstream TTFB over the whole recent
    ring, however many rows a caller asked to see: the terminal's `stats` (10 rows) and the
    dashboard (50) then agree, and both say over how many requests."""
    durations = sorted(r.duration_ms for r in rows)
    ttfbs = sorted(r.ttfb_ms for r in rows if r.ttfb_ms is not None)
    return {
        "requests": len(durations),
        "duration_p50_ms": percentile(durations, 0.5),
        "duration_p95_ms": percentile(durations, 0.95),
        "ttfb_p50_ms": percentile(ttfbs, 0.5),
        "ttfb_p95_ms": percentile(ttfbs, 0.95),
    }


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no data."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(len(sorted_values) * q))
    return sorted_values[rank - 1]


def short_id(value: object) -> str | None:
    """Request ids come from clients (`x-request-id`): keep them short and printable."""
    if not isinstance(value, str) or not value:
        return None
    clean = "".join(c for c in value[:ID_MAX_CHARS] if c.isprintable())
    return clean or None


def short_path(value: object) -> str | None:
    """Paths come from clients too: shortened, printable, never a query string."""
    if not isinstance(value, str) or not value:
        return None
    clean = "".join(c for c in value.split("?")[0][:PATH_MAX_CHARS] if c.isprintable())
    return clean or None
