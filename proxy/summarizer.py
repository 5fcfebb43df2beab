"""The I/O half of compaction by summary: ask a model for a note on a dropped span, and cache it.

The pure half (`proxy.pipeline.summary`) builds the request and the inserted text; this module
sends it, validates the answer, and remembers the result by content hash (`span_key`), so every
later turn that drops the same span inserts byte-identical text without asking again (and the
backend's prefix cache survives).

A summary is an optimisation, never a requirement: `summarize` never raises and never waits
longer than its timeout. A call that times out keeps running in the background and fills the
cache for a later turn; concurrent calls for one span share one request; the number of calls in
flight is bounded. When the cache holds a note for a prefix of the span (the sticky cut moved
forward), only the new messages are sent, with that note to update.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx
import orjson

from proxy.pipeline.summary import (
    extract_facts,
    missing_facts,
    read_answer,
    span_key,
    summary_body,
    summary_message,
    summary_request,
)
from proxy.pipeline.types import Message

logger = logging.getLogger(__name__)

Source = Literal["cache", "model", "timeout", "error", "empty"]
# Spans larger than this (JSON bytes) are prepared in a worker thread: fact extraction runs
# regexes over every tool result, about 0.3 ms per KB.
THREAD_THRESHOLD = 64 * 1024
PREFIX_LENGTHS = 8  # span lengths remembered per first message, for incremental summaries
PREFIX_KEYS = 4096  # first messages remembered


class SummaryCache(Protocol):
    """Where finished summary texts live; a shared store (redis) could implement it later."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str) -> None: ...


class LRUSummaryCache:
    """A bounded in-process LRU. Used from the event loop only, so it needs no lock."""

    def __init__(self, capacity: int = 1024):
        self.capacity = max(1, capacity)
        self._data: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: str, value: str) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True)
class SummaryOutcome:
    """What one `summarize` call got. `text` is the final content to insert, or None.

    source: "cache" (hit), "model" (answered now), "timeout" (still running in the background),
    "error" (HTTP/transport failure, malformed answer, busy, closed), "empty" (nothing to
    summarise, or the model answered with no text). `incremental`: a cached note of a prefix
    was updated instead of summarising the whole span.
    """

    text: str | None
    source: Source
    facts_added: int = 0
    latency: float = 0.0
    error: str | None = None
    incremental: bool = False


@dataclass(frozen=True)
class _Done:
    text: str | None
    source: Source
    facts_added: int = 0
    error: str | None = None
    incremental: bool = False


class Summarizer:
    """Summaries of dropped spans from an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        model: str | None,
        api_key: str | None,
        timeout: float,
        max_tokens: int = 600,
        cache: SummaryCache | None = None,
        fingerprint: str = "",
        max_pending: int = 8,
        call_timeout: float = 180.0,
        max_input_tokens: int = 12_000,
    ):
        """`timeout`: the most a caller waits; `call_timeout`: the most one model call may take
        in the background; `max_pending`: calls in flight at once (beyond it callers get an
        error outcome at once and fall back to a plain trim)."""
        self.client = client
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.cache: SummaryCache = cache if cache is not None else LRUSummaryCache()
        self.fingerprint = fingerprint
        self.max_pending = max_pending
        self.call_timeout = call_timeout
        self.max_input_tokens = max_input_tokens
        self._pending: dict[str, asyncio.Task[_Done]] = {}
        # Key of a span's first message -> lengths of cached spans starting with it (newest last).
        self._lengths: OrderedDict[str, list[int]] = OrderedDict()
        self._closed = False

    @property
    def pending(self) -> int:
        """Summarizer calls in flight (including those whose caller stopped waiting)."""
        return len(self._pending)

    def cached(self, span: Sequence[Message], *, request_model: str | None) -> str | None:
        """The cached text for `span`, without asking anyone (for previews such as /v1/shrink)."""
        model = self.model or request_model
        if not span or not model:
            return None
        return self.cache.get(
            span_key(list(span), model=model, settings_fingerprint=self.fingerprint)
        )

    async def summarize(
        self,
        span: Sequence[Message],
        *,
        request_model: str | None,
        authorization: str | None = None,
        max_input_tokens: int | None = None,
    ) -> SummaryOutcome:
        """The text to insert in place of `span`, within `timeout` seconds; never raises.

        `authorization` (the client's header value) is sent when no api_key is configured, so
        a summarizer that is the client's own upstream accepts the call. `max_input_tokens`
        caps this call's transcript (estimated) below the configured cap, e.g. to fit a
        summarizer that is the upstream model with its small window.
        """
        start = time.monotonic()

        def outcome(done: _Done) -> SummaryOutcome:
            return SummaryOutcome(
                done.text,
                done.source,
                done.facts_added,
                time.monotonic() - start,
                done.error,
                done.incremental,
            )

        span = list(span)
        if not span:
            return outcome(_Done(None, "empty", error="nothing to summarise"))
        model = self.model or request_model
        if not model:
            return outcome(_Done(None, "error", error="no summary model and none in the request"))
        if self._closed:
            return outcome(_Done(None, "error", error="summarizer closed"))
        try:
            key = span_key(span, model=model, settings_fingerprint=self.fingerprint)
        except (TypeError, ValueError) as exc:  # e.g. nesting past orjson's limit
            return outcome(_Done(None, "error", error=f"span cannot be keyed: {exc}"))
        hit = self.cache.get(key)
        if hit is not None:
            return outcome(_Done(hit, "cache"))
        task = self._pending.get(key)
        if task is None:
            if len(self._pending) >= self.max_pending:
                return outcome(_Done(None, "error", error="too many summaries in flight"))
            limit = min(max_input_tokens or self.max_input_tokens, self.max_input_tokens)
            task = asyncio.create_task(self._produce(key, span, model, authorization, limit))
            self._pending[key] = task
            task.add_done_callback(lambda t: self._forget(key, t))
        remaining = max(self.timeout - (time.monotonic() - start), 0.0)
        # asyncio.wait never cancels the task: on timeout it keeps running and fills the cache.
        done, _ = await asyncio.wait({task}, timeout=remaining)
        if not done:
            return outcome(
                _Done(None, "timeout", error=f"no summary within {self.timeout:g}s; continuing")
            )
        if task.cancelled():
            return outcome(_Done(None, "error", error="summarizer closed"))
        return outcome(task.result())

    def _forget(self, key: str, task: asyncio.Task[_Done]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]

    async def _produce(
        self, key: str, span: list[Message], model: str, authorization: str | None, limit: int
    ) -> _Done:
        try:
            return await self._call(key, span, model, authorization, limit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a summary is optional: no failure may reach the request
            logger.exception("summary failed unexpectedly")
            return _Done(None, "error", error=f"{type(exc).__name__}: {exc}")

    async def _call(
        self, key: str, span: list[Message], model: str, authorization: str | None, limit: int
    ) -> _Done:
        previous, covered = self._previous(span, model)
        args = (span, model, previous, covered, limit)
        if _size(span) > THREAD_THRESHOLD:
            facts, body = await asyncio.to_thread(self._prepare, *args)
        else:
            facts, body = self._prepare(*args)
        headers = {"content-type": "application/json", "accept": "application/json"}
        auth = f"Bearer {self.api_key}" if self.api_key else authorization
        if auth:
            headers["authorization"] = auth
        began = time.monotonic()
        try:
            async with asyncio.timeout(self.call_timeout):
                response = await self.client.post(
                    self.url, content=orjson.dumps(body), headers=headers
                )
        except TimeoutError:
            return _Done(
                None, "error", error=f"summarizer gave no answer in {self.call_timeout:g}s"
            )
        except httpx.HTTPError as exc:
            return _Done(None, "error", error=f"summarizer unreachable: {_describe(exc)}")
        if response.status_code != 200:
            snippet = response.text[:200].strip()
            logger.warning("summarizer answered %s: %s", response.status_code, snippet)
            return _Done(None, "error", error=f"summarizer answered {response.status_code}")
        try:
            summary = read_answer(response.content)
        except ValueError as exc:
            logger.warning("summarizer answer unusable: %s", exc)
            return _Done(None, "error", error=str(exc))
        if not summary:
            return _Done(None, "empty", error="summarizer answered with no text")
        lost = missing_facts(summary, facts)
        text = summary_message(summary, lost, role="system", dropped=len(span))["content"]
        self.cache.put(key, text)
        self._remember(span, model)
        logger.info(
            "summary of %d messages%s: %d chars, %d facts appended, %.2fs",
            len(span),
            f" (updated from {covered})" if previous is not None else "",
            len(text),
            len(lost),
            time.monotonic() - began,
        )
        return _Done(text, "model", len(lost), incremental=previous is not None)

    def _prepare(
        self, span: list[Message], model: str, previous: str | None, covered: int, limit: int
    ) -> tuple[list[str], dict[str, Any]]:
        facts = extract_facts(span)
        body = summary_request(
            span[covered:],
            model=model,
            previous=previous,
            max_tokens=self.max_tokens,
            max_input_tokens=limit,
        )
        return facts, body

    def _first_key(self, span: list[Message], model: str) -> str:
        return span_key(span[:1], model=model, settings_fingerprint=self.fingerprint)

    def _previous(self, span: list[Message], model: str) -> tuple[str | None, int]:
        """The cached note of the longest proper prefix of `span`, and that prefix's length."""
        lengths = self._lengths.get(self._first_key(span, model), [])
        for n in sorted(set(lengths), reverse=True):
            if n >= len(span):
                continue
            text = self.cache.get(
                span_key(span[:n], model=model, settings_fingerprint=self.fingerprint)
            )
            if text is not None:
                return summary_body(text), n
        return None, 0

    def _remember(self, span: list[Message], model: str) -> None:
        first = self._first_key(span, model)
        lengths = self._lengths.pop(first, [])
        lengths = [n for n in lengths if n != len(span)][-(PREFIX_LENGTHS - 1) :] + [len(span)]
        self._lengths[first] = lengths
        while len(self._lengths) > PREFIX_KEYS:
            self._lengths.popitem(last=False)

    async def aclose(self) -> None:
        """Cancel every call in flight (the lifespan's shutdown); later calls get an error."""
        self._closed = True
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _size(span: list[Message]) -> int:
    """Characters of content and tool-call arguments: what fact extraction will scan."""
    total = 0
    for m in span:
        if isinstance(m, dict):
            content = m.get("content")
            total += len(content) if isinstance(content, str) else len(repr(content))
            total += len(repr(m.get("tool_calls") or ""))
    return total


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
