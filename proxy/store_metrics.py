"""/metrics for the shared store (`SHRINK_STORE_URL`): is Redis in use, and what went on
without it. Read from `RedisLink.info()` when Prometheus scrapes, like proxy.collectors'
ScrapeCollector, so nothing is added to the request path; registered only when a store URL is
set. And the retrieval store's own size, embedded or in front of Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.redis_link import RedisLink


class StoreCollector(Collector):
    def __init__(self, link: RedisLink) -> None:
        self.link = link

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        info = self.link.info()
        up = GaugeMetricFamily(
            "shrink_store_up",
            "1 while the shared store (Redis) is in use, 0 while requests go on without it.",
        )
        up.add_metric([], 1 if info["up"] else 0)
        calls = CounterMetricFamily("shrink_store_calls", "Calls made to the shared store.")
        calls.add_metric([], info["calls"])
        outages = CounterMetricFamily(
            "shrink_store_outages",
            "Times the shared store became unavailable (each logged once).",
        )
        outages.add_metric([], info["outages"])
        fallbacks = CounterMetricFamily(
            "shrink_store_fallbacks",
            "Shared-store operations that went on with the in-process state instead, by reason: "
            "timeout, error, down (not tried: known to be away), backlog (too many writes "
            "pending).",
            labels=["reason"],
        )
        for reason, n in info["fallbacks"].items():
            fallbacks.add_metric([reason], n)
        pending = GaugeMetricFamily(
            "shrink_store_pending_writes", "Background writes to the shared store in flight."
        )
        pending.add_metric([], info["pending"])
        yield from (up, calls, outages, fallbacks, pending)


class RetrievalCollector(Collector):
    """The embedded retrieval store's size against its bound (`SHRINK_STORE_MB`) and what it
    let go of: its hits, misses and entries are in the cache table (`cache="retrieval"`)."""

    def __init__(self, info: Callable[[], dict[str, int]]) -> None:
        self.info = info

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        info = self.info()
        held = GaugeMetricFamily(
            "shrink_retrieval_store_bytes",
            "Bytes the originals kept for retrieval take in this process's memory.",
        )
        held.add_metric([], info["bytes"])
        evicted = CounterMetricFamily(
            "shrink_retrieval_store_evicted",
            "Originals the embedded store let go of (expired, or evicted for room).",
        )
        evicted.add_metric([], info["evicted"])
        yield from (held, evicted)
