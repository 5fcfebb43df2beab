"""The I/O half of compaction by summary: ask a model for a note on a dropped span, and cache it.

The pure half (`proxy.pipeline.summary`) builds the request and the inserted text; this module
sends it, validates the answer, and remembers the result by content hash (`span_key`), so every
later turn that drops the same span inserts byte-identical text without asking again (and the
backend's prefix cache survives).

A summary is an optimisation, never a requirement: `summarize` never raises and never waits
longer than its timeout. One call per span is in flight at a time (single-flight, by `span_key`):
concurrent requests for the span wait on the same task, and a call whose callers stopped waiting
keeps running in the background (bounded in number and in time) and fills the cache for a later
turn. How long each summarizer model takes is tracked (`Pace`); when a summary is expected to
take longer than the timeout, the request does not wait at all ("deferred"): it is trimmed at
once and the summary is made for the next turn, after this request's own upstream call when the
summarizer is the upstream itself (a one-slot local server would otherwise run the summary
first). A span whose summary failed after longer than the timeout is not asked for again for a
minute (a quick failure is retried on the next turn). When the cache holds a note for a prefix
of the span (the sticky cut moved forward), only the new messages are sent, with that note to
update.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

from proxy.pipeline.dialect import CHAT, Dialect
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
from proxy.summary_cache import LRUSummaryCache, SummaryCache

logger = logging.getLogger(__name__)

Source = Literal["cache", "model", "timeout", "deferred", "error", "empty"]
# Spans larger than this (JSON bytes) are prepared in a worker thread: fact extraction runs
# regexes over every tool result, about 0.3 ms per KB.
THREAD_THRESHOLD = 64 * 1024
PREFIX_LENGTHS = 8  # span lengths remembered per first message, for incremental summaries
PREFIX_KEYS = 4096  # first messages remembered
PACE_WEIGHT = 0.3  # weight of the newest duration in a model's moving average
PACE_MODELS = 64  # summarizer models whose pace is remembered
HOLD_MAX = 30.0  # longest a deferred summary waits for its request's upstream call to end
# A span whose summary failed slowly is not asked for again for this long: a summarizer that
# fails after 30 s (a prompt over its window, say) would otherwise be asked again every turn.
FAILURE_TTL = 60.0
FAILURE_KEYS = 1024


class Pace:
    """How long each summarizer model takes to write a summary: a moving average (EWMA) of the
    calls that answered, a call cut off by its time limit counting as that long. Summaries of
    spans of different sizes take different times; the average only has to tell a summarizer
    that answers within the timeout from one that does not (a small local model: 30 s)."""

    def __init__(self, weight: float = PACE_WEIGHT, models: int = PACE_MODELS):
        self.weight = weight
        self.models = models
        self._seconds: OrderedDict[str, float] = OrderedDict()

    def record(self, model: str, seconds: float) -> None:
        old = self._seconds.pop(model, None)
        self._seconds[model] = seconds if old is None else old + self.weight * (seconds - old)
        while len(self._seconds) > self.models:
            self._seconds.popitem(last=False)

    def expected(self, model: str) -> float | None:
        """Seconds a summary by `model` is expected to take; None before the first answer."""
        return self._seconds.get(model)

    def snapshot(self) -> dict[str, float]:
        return dict(self._seconds)


@dataclass(frozen=True)
class SummaryOutcome:
    """What one `summarize` call got. `text` is the final content to insert, or None.

    source: "cache" (hit), "model" (answered now), "timeout" (still running in the background),
    "deferred" (not waited for: the summarizer is known to take longer than the timeout; made
    in the background), "error" (HTTP/transport failure, malformed answer, busy, closed),
    "empty" (nothing to summarise, or the model answered with no text). `incremental`: a cached
    note of a prefix was updated instead of summarising the whole span. `joined`: the call was
    already in flight for another request, and this one waited on it.
    """

    text: str | None
    source: Source
    facts_added: int = 0
    latency: float = 0.0
    error: str | None = None
    incremental: bool = False
    joined: bool = False


@dataclass(frozen=True)
class _Done:
    text: str | None
    source: Source
    facts_added: int = 0
    error: str | None = None
    incremental: bool = False
    # The call's duration tells the summarizer's pace: it answered (anything), or was cut off
    # by call_timeout; an unreachable summarizer says nothing of it.
    paced: bool = True


@dataclass(frozen=True)
class _Job:
    """One summary to make: the span (in `dialect`'s format) under `key`, by `model`."""

    key: str
    span: list[Message]
    model: str
    authorization: str | None
    limit: int  # the transcript's cap, in estimated tokens
    dialect: Dialect


@dataclass(frozen=True)
class _Flight:
    """One summarizer call in flight: its task, the model asked, and when it was started."""

    task: asyncio.Task[_Done]
    model: str
    started: float


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
        on_made: Callable[[str, float], None] | None = None,
    ):
        """`timeout`: the most a caller waits; `call_timeout`: the most one model call may take
        in the background; `max_pending`: calls in flight at once (beyond it callers get an
        error outcome at once and fall back to a plain trim). `on_made(result, seconds)`: called
        when a model call ends ("ok", "error" or "empty"), whether or not anyone still waits."""
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
        self.on_made = on_made
        self.pace = Pace()
        self._pending: dict[str, _Flight] = {}
        # Key of a span's first message -> lengths of cached spans starting with it (newest last).
        self._lengths: OrderedDict[str, list[int]] = OrderedDict()
        self._failed: OrderedDict[str, float] = OrderedDict()  # key -> when to ask again
        self._closed = False

    @property
    def pending(self) -> int:
        """Summarizer calls in flight (including those whose caller stopped waiting)."""
        return len(self._pending)

    def expected(self, model: str) -> float | None:
        """Seconds a new summary by `model` is expected to take: its pace, or longer while a
        call to it has already been running longer (a summarizer that got slow, or queues)."""
        now = time.monotonic()
        running = [now - f.started for f in self._pending.values() if f.model == model]
        known = self.pace.expected(model)
        if known is None and not running:
            return None
        return max([known or 0.0, *running])

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
        hold: Callable[[], Awaitable[object]] | None = None,
        dialect: Dialect = CHAT,
    ) -> SummaryOutcome:
        """The text to insert in place of `span`, within `timeout` seconds; never raises.

        `authorization` (the client's header value) is sent when no api_key is configured, so
        a summarizer that is the client's own upstream accepts the call. `max_input_tokens`
        caps this call's transcript (estimated) below the configured cap, e.g. to fit a
        summarizer that is the upstream model with its small window. `hold`: what a deferred
        call awaits before it starts (at most HOLD_MAX s), e.g. the end of this request's own
        upstream call when both go to the same one-slot server. `dialect`: the span's format.
        """
        start = time.monotonic()
        joined = False

        def outcome(done: _Done) -> SummaryOutcome:
            return SummaryOutcome(
                done.text,
                done.source,
                done.facts_added,
                time.monotonic() - start,
                done.error,
                done.incremental,
                joined,
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
        if hit is None:  # another replica's summary, within the store's timeout (or None)
            hit = await self.cache.fetch(key)
        if hit is not None:
            return outcome(_Done(hit, "cache"))
        again = self._failed.get(key, 0.0) - start
        if again > 0:
            error = f"the last summary of this span failed; asked again in {again:.0f}s"
            return outcome(_Done(None, "error", error=error))
        flight = self._pending.get(key)
        if flight is None:
            if len(self._pending) >= self.max_pending:
                return outcome(_Done(None, "error", error="too many summaries in flight"))
            expected = self.expected(model)
            slow = expected is not None and expected > self.timeout
            limit = min(max_input_tokens or self.max_input_tokens, self.max_input_tokens)
            job = _Job(key, span, model, authorization, limit, dialect)
            flight = self._start(job, hold if slow else None)
        else:
            joined = True
            known = self.pace.expected(model)
            expected = None if known is None else known - (start - flight.started)
            slow = expected is not None and expected > self.timeout
        if slow:
            return outcome(_Done(None, "deferred", error=self._too_slow(model, expected)))
        remaining = max(self.timeout - (time.monotonic() - start), 0.0)
        # asyncio.wait never cancels the task: on timeout it keeps running and fills the cache.
        done, _ = await asyncio.wait({flight.task}, timeout=remaining)
        if not done:
            return outcome(
                _Done(None, "timeout", error=f"no summary within {self.timeout:g}s; continuing")
            )
        if flight.task.cancelled():
            return outcome(_Done(None, "error", error="summarizer closed"))
        return outcome(flight.task.result())

    def _too_slow(self, model: str, expected: float | None) -> str:
        return (
            f"summaries by {model} take about {expected or 0:.0f}s, more than the "
            f"{self.timeout:g}s a request waits; made in the background for a later turn"
        )

    def _start(self, job: _Job, hold: Callable[[], Awaitable[object]] | None) -> _Flight:
        task = asyncio.create_task(self._produce(job, hold))
        flight = _Flight(task, job.model, time.monotonic())
        self._pending[job.key] = flight
        task.add_done_callback(lambda t: self._forget(job.key, t))
        return flight

    def _forget(self, key: str, task: asyncio.Task[_Done]) -> None:
        flight = self._pending.get(key)
        if flight is not None and flight.task is task:
            del self._pending[key]

    async def _produce(self, job: _Job, hold: Callable[[], Awaitable[object]] | None) -> _Done:
        key, model = job.key, job.model
        if hold is not None:
            try:
                async with asyncio.timeout(HOLD_MAX):
                    await hold()
            except TimeoutError:
                pass
        began = time.monotonic()
        try:
            done = await self._call(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a summary is optional: no failure may reach the request
            logger.exception("summary failed unexpectedly")
            done = _Done(None, "error", error=f"{type(exc).__name__}: {exc}", paced=False)
        seconds = time.monotonic() - began
        if done.paced:
            self.pace.record(model, seconds)
        if done.text is None and seconds > self.timeout:
            self._failed.pop(key, None)
            self._failed[key] = time.monotonic() + FAILURE_TTL
            while len(self._failed) > FAILURE_KEYS:
                self._failed.popitem(last=False)
        if self.on_made is not None:
            self.on_made("ok" if done.source == "model" else done.source, seconds)
        return done

    async def _call(self, job: _Job) -> _Done:
        key, span, model, authorization = job.key, job.span, job.model, job.authorization
        previous, covered = self._previous(span, model)
        if _size(span) > THREAD_THRESHOLD:
            facts, body = await asyncio.to_thread(self._prepare, job, previous, covered)
        else:
            facts, body = self._prepare(job, previous, covered)
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
                None,
                "error",
                error=f"summarizer gave no answer in {self.call_timeout:g}s",
            )
        except httpx.HTTPError as exc:
            return _Done(
                None, "error", error=f"summarizer unreachable: {_describe(exc)}", paced=False
            )
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
        self, job: _Job, previous: str | None, covered: int
    ) -> tuple[list[str], dict[str, Any]]:
        facts = extract_facts(job.span, dialect=job.dialect)
        body = summary_request(
            job.span[covered:],
            model=job.model,
            previous=previous,
            max_tokens=self.max_tokens,
            max_input_tokens=job.limit,
            dialect=job.dialect,
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
        tasks = [flight.task for flight in self._pending.values()]
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
