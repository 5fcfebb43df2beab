"""create_app(settings): wiring only. The lifespan builds the AppState; create_app does no I/O."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Scope

from proxy import __version__
from proxy.dashboard import build_router
from proxy.discovery import WindowDiscovery
from proxy.errors import install_handlers
from proxy.heap import HeapTrimmer
from proxy.inflight import InFlight
from proxy.mcp.http import McpEndpoint
from proxy.metrics import Metrics
from proxy.overflow import Calibration
from proxy.redis_link import RedisLink
from proxy.retrieval.redis import RedisStore
from proxy.retrieval.store import MemoryStore, Store
from proxy.routes import authorize, router, state_of
from proxy.settings import Settings
from proxy.shared_learning import SharedLearning
from proxy.shrinker import Shrinker
from proxy.state import AppState
from proxy.store_metrics import RetrievalCollector, StoreCollector
from proxy.summarizer import Summarizer
from proxy.summary_cache import LRUSummaryCache, SharedSummaryCache, SummaryCache
from proxy.tokenizers import Tokenizers
from proxy.transport import transport_for
from proxy.upstream import Timeouts, Upstream


def build_tokenizers(settings: Settings) -> Tokenizers:
    return Tokenizers(
        override=settings.tokenizer,
        cache_dir=settings.tiktoken_cache_dir,
        cache_size=settings.token_cache_size,
    )


def build_upstream(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None
) -> Upstream:
    key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
    return Upstream(
        settings.upstream_url,
        api_key=key,
        timeouts=Timeouts(
            connect=settings.connect_timeout,
            first_byte=settings.first_byte_timeout,
            idle=settings.idle_timeout,
            write=settings.write_timeout,
        ),
        max_connections=settings.max_connections,
        transport=transport or transport_for(settings.upstream_transport, settings.max_connections),
    )


def build_discovery(settings: Settings, upstream: Upstream) -> WindowDiscovery | None:
    if not settings.discover_window:
        return None
    key = upstream.api_key

    def headers() -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {key}")] if key else []

    return WindowDiscovery(
        upstream.client,
        settings.upstream_url,
        ttl=settings.discovery_ttl,
        timeout=settings.discovery_timeout,
        headers=headers,
    )


def build_summarizer(
    settings: Settings,
    client: httpx.AsyncClient,
    metrics: Metrics | None = None,
    link: RedisLink | None = None,
) -> Summarizer:
    key = settings.summary_api_key or (None if settings.summary_url else settings.upstream_api_key)
    return Summarizer(
        client,
        settings.summary_url or settings.upstream_url,
        model=settings.summary_model,
        api_key=key.get_secret_value() if key else None,
        timeout=settings.summary_timeout,
        max_tokens=settings.summary_max_tokens,
        cache=build_summary_cache(settings, link),
        fingerprint=f"{settings.summary_model}|{settings.summary_max_tokens}",
        max_pending=settings.summary_max_pending,
        call_timeout=settings.summary_call_timeout,
        on_made=metrics.observe_summary_made if metrics is not None else None,
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    mcp = McpEndpoint(settings, state_of, authorize)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        upstream = build_upstream(settings)
        tokenizers = build_tokenizers(settings)
        # Load the encodings now (a file read each), not on the first request.
        named = [*settings.model_windows, *filter(None, [settings.summary_model])]
        for name in tokenizers.startup_encodings(named):
            await anyio.to_thread.run_sync(tokenizers.for_encoding, name)
        discovery = build_discovery(settings, upstream)
        metrics = build_metrics(settings, tokenizers, discovery)
        # Shared state (SHRINK_STORE_URL): Redis behind this process's own caches and stores.
        link = build_link(settings)
        calibration = Calibration()
        learning = None
        if link is not None:
            metrics.registry.register(StoreCollector(link))
            learning = SharedLearning(link, calibration, discovery, interval=settings.store_refresh)
        summarizer = build_summarizer(settings, upstream.client, metrics, link)
        metrics.watch_summarizer(summarizer)
        retrieval = build_store(settings, link)
        # The originals behind the hashes: hits, misses and entries of this process's store.
        metrics.watch_cache("retrieval", lambda: retrieval_info(retrieval))
        metrics.registry.register(RetrievalCollector(retrieval.info))
        app.state.shrink = AppState(
            settings=settings,
            upstream=upstream,
            tokenizers=tokenizers,
            shrinker=Shrinker(
                settings,
                tokenizers,
                on_count_ahead=metrics.count_ahead.inc,
                on_error=metrics.observe_pipeline_error,
                on_plan=metrics.observe_plan,
            ),
            summarizer=summarizer,
            discovery=discovery,
            metrics=metrics,
            calibration=calibration,
            heap=HeapTrimmer(settings.heap_trim_interval, on_trim=metrics.heap_trims.inc),
            retrieval=retrieval,
        )
        background = [asyncio.create_task(app.state.shrink.heap.run())]
        if learning is not None:
            background.append(asyncio.create_task(learning.run()))
        try:
            async with mcp.running():
                yield
        finally:
            for task in background:
                task.cancel()
            if discovery is not None:
                await discovery.aclose()
            await summarizer.aclose()
            if link is not None:
                await link.aclose()
            await upstream.aclose()
            app.state.shrink.shrinker.close()

    app = FastAPI(
        title="shrink-proxy",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_handlers(app)
    app.add_middleware(InFlight, get_metrics=metrics_of_scope)
    app.include_router(
        build_router(
            lambda request: state_of(request).metrics,
            check_auth=lambda request: authorize(request, state_of(request)),
        )
    )
    app.include_router(router)
    # The MCP tools over Streamable HTTP (GET, POST and DELETE on one path: proxy.mcp.http).
    app.router.routes.append(Route("/mcp", endpoint=mcp))
    return app


def build_link(settings: Settings) -> RedisLink | None:
    """The connection to the shared store, when SHRINK_STORE_URL names one (no I/O yet: redis-py
    connects on the first call)."""
    if not settings.store_url:
        return None
    return RedisLink.from_url(
        settings.store_url, timeout=settings.store_timeout, retry=settings.store_retry
    )


def build_store(settings: Settings, link: RedisLink | None = None) -> Store:
    """The retrieval store: embedded, bounded by the settings; in front of Redis with a link."""
    local = MemoryStore(
        settings.store_items, int(settings.store_mb * 1_000_000), settings.store_ttl
    )
    if link is None:
        return local
    max_chars = int(settings.store_value_mb * 1_000_000)
    return RedisStore(link, local, ttl=settings.store_ttl, max_chars=max_chars)


def build_summary_cache(settings: Settings, link: RedisLink | None = None) -> SummaryCache:
    local = LRUSummaryCache(settings.summary_cache_size, int(settings.summary_cache_mb * 1_000_000))
    if link is None:
        return local
    max_chars = int(settings.store_value_mb * 1_000_000)
    return SharedSummaryCache(link, local, ttl=settings.store_summary_ttl, max_chars=max_chars)


def retrieval_info(store: Store) -> tuple[int, int, int]:
    info = store.info()
    return info["hits"], info["misses"], info["entries"]


def build_metrics(
    settings: Settings, tokenizers: Tokenizers, discovery: WindowDiscovery | None
) -> Metrics:
    metrics = Metrics()
    metrics.watch_cache("token_counts", tokenizers.cache_info)
    for model, window in settings.model_windows.items():
        metrics.set_window(model, window)
    if discovery is not None:
        metrics.watch_windows(discovery.snapshot)
    return metrics


def metrics_of_scope(scope: Scope) -> Metrics | None:
    """The app's Metrics for the in-flight middleware (None until the lifespan has run)."""
    state = getattr(scope["app"].state, "shrink", None)
    return state.metrics if state is not None else None


def create_worker_app() -> FastAPI:
    """Factory for `--workers N`: each worker process configures logging and reads Settings."""
    from proxy import logs

    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)
    app = create_app(settings)
    settle_heap()
    return app


def settle_heap() -> None:
    """Before serving: what is loaded by now (modules, the app, settings) lives as long as the
    process, so take it out of the garbage collector's sight. Otherwise the collections that
    parsing a 160 KB request body triggers walk all of it again and again (bench/overhead:
    ~10% of the CPU of a large request at 64 concurrent). Serving processes only: a test
    process that builds many apps would never collect their cycles."""
    gc.collect()
    gc.freeze()
