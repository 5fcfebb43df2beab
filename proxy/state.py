"""AppState: everything a request handler needs, built by the app's lifespan (proxy.app)."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.discovery import WindowDiscovery
from proxy.heap import HeapTrimmer
from proxy.metrics import Metrics
from proxy.overflow import Calibration
from proxy.retrieval.store import MemoryStore, Store
from proxy.settings import Settings
from proxy.shrinker import Shrinker
from proxy.summarizer import Summarizer
from proxy.tokenizers import Tokenizers
from proxy.upstream import Upstream


@dataclass
class AppState:
    """Owned by the lifespan (no module globals); routes reach it through the request."""

    settings: Settings
    upstream: Upstream
    tokenizers: Tokenizers
    shrinker: Shrinker
    summarizer: Summarizer
    metrics: Metrics = field(default_factory=Metrics)
    discovery: WindowDiscovery | None = None
    calibration: Calibration = field(default_factory=Calibration)
    heap: HeapTrimmer = field(default_factory=lambda: HeapTrimmer(0))
    # The originals behind the refs in markers (proxy.retrieval).
    retrieval: Store = field(default_factory=MemoryStore)
