"""Building blocks of the app's Prometheus exposition: bounded label values, scrape-time values.

`LabelBound` keeps a client-controlled label (the model name) from growing without limit: the
first N distinct values keep their name, later ones become "other". `ScrapeCollector` exports
values that other components already keep (cache hit counts, discovered windows) by reading them
when Prometheus scrapes, so nothing is added to the request path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

OTHER = "other"
UNKNOWN = "unknown"
LABEL_MAX_CHARS = 100
# The model label of requests that name none (pass-through GET /v1/models, say): "unknown" is
# for a name that cannot be shown (not a string, no printable characters).
NO_MODEL = "none"
KNOWN_STAGES = ("tools", "trim", "truncate", "user_cut", "summary", "work_budget")
# LLM requests run from milliseconds (a cached /v1/models) to minutes (a long generation).
SLOW_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
# The pipeline's own cost: well under a millisecond for small requests, ~100 ms for huge ones.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

CacheInfoFn = Callable[[], tuple[int, int, int]]


class _CacheView(Protocol):
    def info(self) -> tuple[int, int, int]: ...


class SummarizerView(Protocol):
    """What the metrics read of a `proxy.summarizer.Summarizer` (no import of its I/O)."""

    @property
    def pending(self) -> int: ...

    @property
    def cache(self) -> _CacheView: ...


class LabelBound:
    """Keeps a label's cardinality bounded: the first `limit` distinct values, then "other"."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, value: object) -> str:
        if not isinstance(value, str) or not value:
            return UNKNOWN
        if value in self.seen:  # seen values are already clean: the per-request case
            return value
        value = "".join(c for c in value[:LABEL_MAX_CHARS] if c.isprintable())
        if not value:
            return UNKNOWN
        if value in self.seen:
            return value
        with self.lock:
            if len(self.seen) < self.limit:
                self.seen.add(value)
                return value
        return OTHER


class ScrapeCollector(Collector):
    """Values read when Prometheus scrapes: caches' cumulative counts and the models' windows.

    The caches already count their own hits (the token counter's `cache_info()`), and window
    discovery already keeps its table (`snapshot()`); reading them at scrape time costs nothing
    on the request path.
    """

    def __init__(self, windows: Callable[[], dict[str, int]]) -> None:
        self.sources: dict[str, CacheInfoFn] = {}
        self.windows = windows

    def read_caches(self) -> dict[str, tuple[int, int, int]]:
        out = {}
        for name, info in sorted(self.sources.items()):
            try:
                hits, misses, size = info()
            except Exception:  # a broken source must not break the whole scrape
                log.exception("cache info for %s failed", name)
                continue
            out[name] = (hits, misses, size)
        return out

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        labels = ["cache"]
        hits = CounterMetricFamily("shrink_cache_hits", "Cache hits by cache.", labels=labels)
        misses = CounterMetricFamily("shrink_cache_misses", "Cache misses by cache.", labels=labels)
        size = GaugeMetricFamily("shrink_cache_entries", "Entries held, by cache.", labels=labels)
        for name, (h, m, s) in self.read_caches().items():
            hits.add_metric([name], h)
            misses.add_metric([name], m)
            size.add_metric([name], s)
        windows = GaugeMetricFamily(
            "shrink_model_window_tokens",
            "Context window per model, as configured or discovered from the upstream.",
            labels=["model"],
        )
        for model, tokens in sorted(self.windows().items()):
            windows.add_metric([model], tokens)
        yield from (hits, misses, size, windows)
