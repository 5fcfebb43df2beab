"""Discovering the context window a backend actually serves for a model.

The configured window is a guess; the backend knows the truth, and each kind says it somewhere
else. Probes run in order and stop at the first usable number:

1. `GET {base}/models` -- vLLM's model card carries `max_model_len` (vllm/entrypoints/openai/
   protocol.py, `ModelCard.max_model_len`: the served `--max-model-len`), and OpenRouter's list
   carries `context_length` for the same `id`. llama.cpp's list carries `meta.n_ctx_train`: the
   trained maximum, not what is served, so it is ignored.
2. `GET {root}/props` -- llama-server: `default_generation_settings.n_ctx` is the per-slot
   context (tools/server/server-context.cpp `get_props`: `{"n_ctx", meta->slot_n_ctx}`), already
   divided by `--parallel`. A top-level `n_ctx` or a list of slots is read the same way.
3. `GET {root}/api/ps` -- Ollama: `models[].context_length` of the loaded runner (api/types.go
   `ProcessModelResponse.ContextLength`, the CONTEXT column of `ollama ps`). `/api/show` gives
   only the trained maximum and is never used. Only loaded models are listed, so a miss there is
   retried soon rather than after the full TTL.
4. `GET {root}/api/v0/models` -- LM Studio (docs: REST API v0): `loaded_context_length` when
   present, else `max_context_length` (then re-probed soon, as it may load with less).

`root` is the base URL without its trailing `/v1`. Every probe is one GET under a short
timeout; a transport failure (refused, timeout) ends the round at once, so a dead or hung backend
costs one timeout, not four. Results and failures are cached per model for the TTL, concurrent
callers for one model share one in-flight round, and a limit learnt from an overflow error
(`remember`) wins over discovery until its TTL runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from proxy.upstream import loggable_url

log = logging.getLogger(__name__)

Headers = Callable[[], list[tuple[str, str]]]
# Windows outside this range are junk (a 0, a -1 "unlimited", a byte count) and are ignored.
MIN_WINDOW = 256
MAX_WINDOW = 100_000_000
# OpenRouter's full model list, the largest real answer, is well under a megabyte; a probe that
# reads more is talking to something that is not a model list (a stream, a file), so it stops.
MAX_PROBE_BYTES = 4 * 1024 * 1024


class ProbeFailed(Exception):
    """The backend could not be reached or did not answer in time: stop probing."""


@dataclass(frozen=True)
class Found:
    window: int | None
    # Discovered but provisional (LM Studio's trained maximum for an unloaded model), or not
    # found only because the model is not loaded yet (Ollama): ask again after `recheck` seconds.
    provisional: bool = False


@dataclass
class Entry:
    window: int | None
    expires: float
    remembered: bool = False
    probed: float = 0.0  # when the backend was last asked (clock time)


def _window(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    n = int(value)
    return n if MIN_WINDOW <= n <= MAX_WINDOW else None


def _entries(doc: Any, key: str) -> list[dict[str, Any]]:
    items = doc.get(key) if isinstance(doc, dict) else None
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def from_models_list(doc: Any, model: str) -> Found:
    """vLLM (`max_model_len`) and OpenRouter (`context_length`) from an OpenAI model list."""
    for card in _entries(doc, "data"):
        if card.get("id") == model:
            for key in ("max_model_len", "context_length"):
                window = _window(card.get(key))
                if window:
                    return Found(window)
    return Found(None)


def from_llama_props(doc: Any) -> Found:
    """llama-server `/props`: per-slot `n_ctx`, in the shapes old and new versions use."""
    if isinstance(doc, list):  # a list of slots: the smallest one bounds any request
        sizes = [_window(s.get("n_ctx")) for s in doc if isinstance(s, dict)]
        found = [s for s in sizes if s]
        return Found(min(found) if found else None)
    if not isinstance(doc, dict):
        return Found(None)
    settings = doc.get("default_generation_settings")
    if isinstance(settings, dict):
        window = _window(settings.get("n_ctx"))
        if window:
            return Found(window)
    return Found(_window(doc.get("n_ctx")))


def ollama_names(model: str) -> set[str]:
    """Ollama lists `llama3` as `llama3:latest`."""
    names = {model}
    if ":" not in model.rsplit("/", 1)[-1]:
        names.add(model + ":latest")
    return names


def from_ollama_ps(doc: Any, model: str) -> Found:
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        return Found(None)
    names = ollama_names(model)
    for loaded in _entries(doc, "models"):
        if loaded.get("name") in names or loaded.get("model") in names:
            return Found(_window(loaded.get("context_length")))
    # Ollama answered but the model is not loaded (yet): the first chat request loads it.
    return Found(None, provisional=True)


def from_lmstudio(doc: Any, model: str) -> Found:
    for card in _entries(doc, "data"):
        if card.get("id") == model:
            loaded = _window(card.get("loaded_context_length"))
            if loaded:
                return Found(loaded)
            return Found(_window(card.get("max_context_length")), provisional=True)
    return Found(None)


class WindowDiscovery:
    """Per-model served windows, probed from the backend and cached (one instance per app)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        ttl: float = 300.0,
        timeout: float = 2.0,
        headers: Headers | None = None,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = 15.0,
        max_models: int = 1024,
    ):
        self.client = client
        self.base = base_url.rstrip("/")
        self.root = self.base[:-3] if self.base.endswith("/v1") else self.base
        self.ttl = ttl
        self.timeout = timeout
        self.headers = headers
        self.clock = clock
        self.recheck = min(recheck, ttl)
        self.max_models = max_models
        self._cache: OrderedDict[str, Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[int | None]] = {}
        self._logged: set[str] = set()
        # Told of every limit learnt from an overflow error (model, window, seconds it holds):
        # proxy.shared_learning publishes it to other replicas.
        self.on_remember: Callable[[str, int, float], None] | None = None

    async def window_for(self, model: str) -> int | None:
        """The served window for `model`, or None when the backend does not say. Never raises."""
        entry = self._cache.get(model)
        if entry is not None and entry.expires > self.clock():
            return entry.window
        task = self._inflight.get(model)
        if task is None:
            task = asyncio.ensure_future(self._discover(model))
            self._inflight[model] = task
            task.add_done_callback(lambda t: self._done(model, t))
        # A caller that is cancelled (client gone) must not cancel the round others wait on.
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        """Cancel rounds still in flight (the app is shutting down)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def remember(self, model: str, window: int) -> None:
        """A limit the backend stated in an overflow error: it wins until the TTL runs out."""
        if _window(window) is None:
            return
        self._store(model, Entry(window, self.clock() + self.ttl, remembered=True))
        log.info("learnt the context window of %s from an overflow error: %d", model, window)
        if self.on_remember is not None:
            self.on_remember(model, window, self.ttl)

    def adopt(self, model: str, window: int, ttl: float) -> None:
        """A limit another replica learnt from an overflow error, for `ttl` more seconds."""
        if _window(window) is None or ttl <= 0:
            return
        current = self._cache.get(model)
        if current is not None and current.remembered and current.window == window:
            return  # known already (keep its own expiry: no log line every refresh)
        self._store(model, Entry(window, self.clock() + min(ttl, self.ttl), remembered=True))
        log.info("learnt the context window of %s from another replica: %d", model, window)

    def forget(self, model: str) -> None:
        """Drop what was discovered for `model` (not a remembered limit): probe on next use.

        At most once per `recheck` seconds per model: a backend whose usage counts always look
        low (another tokenizer, cached-prompt accounting) must not cause a probe per request.
        """
        entry = self._cache.get(model)
        if entry is not None and not entry.remembered:
            if self.clock() - entry.probed >= self.recheck:
                del self._cache[model]

    def snapshot(self) -> dict[str, int]:
        """Known windows by model, for metrics and the dashboard: the last one found, also once
        its entry is due for a fresh probe (the next request probes; until then it is still the
        window requests are planned for, and /stats showed `{}` between requests)."""
        return {m: e.window for m, e in self._cache.items() if e.window is not None}

    def _done(self, model: str, task: asyncio.Task[int | None]) -> None:
        if self._inflight.get(model) is task:
            del self._inflight[model]

    def _store(self, model: str, entry: Entry) -> None:
        self._cache[model] = entry
        self._cache.move_to_end(model)
        while len(self._cache) > self.max_models:
            self._cache.popitem(last=False)

    async def _discover(self, model: str) -> int | None:
        try:
            found = await self._probe(model)
        except Exception as exc:  # ProbeFailed, or anything unforeseen: never fail a request
            self._log_once(model, f"the backend did not answer ({_describe(exc)})")
            found = Found(None)
        now = self.clock()
        current = self._cache.get(model)
        if current is not None and current.remembered and current.expires > now:
            return current.window  # an overflow error said so while we were probing
        if found.window is None and not found.provisional:
            self._log_once(model, "no endpoint states it")
        life = self.recheck if found.provisional else self.ttl
        self._store(model, Entry(found.window, now + life, probed=now))
        if found.window is not None and (current is None or current.window != found.window):
            log.info("discovered the context window of %s: %d", model, found.window)
        return found.window

    async def _probe(self, model: str) -> Found:
        provisional: Found | None = None
        probes: list[tuple[str, Callable[[Any], Found]]] = [
            (self.base + "/models", lambda d: from_models_list(d, model)),
            (self.root + "/props", from_llama_props),
            (self.root + "/api/ps", lambda d: from_ollama_ps(d, model)),
            (self.root + "/api/v0/models", lambda d: from_lmstudio(d, model)),
        ]
        for url, read in probes:
            doc = await self._get(url)
            if doc is None:
                continue
            found = read(doc)
            if found.window is not None and not found.provisional:
                return found
            if found.provisional and provisional is None:
                provisional = found
        return provisional or Found(None)

    async def _get(self, url: str) -> Any:
        """The JSON at `url`, None when it is not there; ProbeFailed when the backend is not."""
        headers = self.headers() if self.headers else []
        try:
            async with asyncio.timeout(self.timeout):
                async with self.client.stream(
                    "GET", url, headers=headers, timeout=httpx.Timeout(self.timeout)
                ) as resp:
                    ctype = resp.headers.get("content-type", "json")
                    if resp.status_code != 200 or "json" not in ctype.lower():
                        return None
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_PROBE_BYTES:
                            return None
        except (TimeoutError, httpx.TransportError, OSError) as exc:
            raise ProbeFailed(f"GET {url}: {_describe(exc)}") from None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return None

    def _log_once(self, model: str, why: str) -> None:
        if model in self._logged:
            return
        if len(self._logged) >= self.max_models:
            self._logged.clear()
        self._logged.add(model)
        log.info(
            "context window of %s not discovered from %s: %s; using the configured window",
            model,
            loggable_url(self.base),
            why,
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
