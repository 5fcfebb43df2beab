"""The edge of the pipeline: from a parsed request and settings to a `Plan`.

Picks the window for the model, the counter for its encoding and the budget, then runs the pure
pipeline, in a worker thread when the request is large so one big request does not stall every
other request on the event loop.

A bug in the pipeline costs its request the shrinking, never the answer: the exception is
logged (its type and where, never content) and counted, and the request is planned again with
stage 2's cut and stage 3's plain head+tail alone, or, if that fails too, sent unchanged
(`fallback` in `x-shrink-actions`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio

from proxy.ahead import CountAhead
from proxy.errors import InvalidRequest, Overloaded
from proxy.memo import CompactMemo
from proxy.pipeline import (
    Budget,
    CallCounter,
    Plan,
    Policy,
    Report,
    compact_key,
    compute_budget,
    shrink,
    tool_texts,
)
from proxy.pipeline.summary import summary_room
from proxy.pipeline.types import Mode
from proxy.pipeline.work import Work, WorkExceeded
from proxy.planner import PlanPool, guess_model
from proxy.retrieval.keep import with_tool
from proxy.settings import Settings
from proxy.tokenizers import Tokenizers
from proxy.wire.formats import CHAT_WIRE, WireFormat
from proxy.wire.responses import SERVER_HISTORY

log = logging.getLogger(__name__)

MODES: tuple[Mode, ...] = ("auto", "off", "tools", "trim", "compact")
# A tool limit past any text: the fallback plan's stage 1 then leaves every result alone.
UNLIMITED = sys.maxsize
# Below this many body bytes (or characters of messages not seen before) the pipeline runs
# inline: a thread hop (tens of microseconds, and GIL hand-offs with the event loop) costs more
# than the work. Above it a cold request can take tens of milliseconds (bench/overhead: a 164 KB
# body, ~30 ms), which inline would stall every other connection. A warm conversation (its
# history counted on earlier turns) costs ~0.3 ms however long it is, so it stays inline.
THREAD_THRESHOLD = 32 * 1024
# A session past this many messages is planned in a thread even when warm: its replay and its
# facts scale with its length, and an evicted memo would make a warm-looking one cold (a
# 4,000-message request once ran 9.2 s inline). A thread hop costs tens of microseconds.
INLINE_MAX_MESSAGES = 200


def parse_mode(header: str | None, settings: Settings) -> Mode:
    """The request's mode: its `x-shrink-mode` header, else the configured default; never auto."""
    mode = (header or "").strip().lower() or "auto"
    if mode not in MODES:
        raise InvalidRequest(
            f"x-shrink-mode must be one of {', '.join(MODES)}; got {header!r}.",
            param="x-shrink-mode",
        )
    if mode == "auto":
        if settings.mode != "auto":
            return settings.mode
        return "compact" if settings.summary_url else "trim"
    return mode  # type: ignore[return-value]


class Shrinker:
    def __init__(
        self,
        settings: Settings,
        tokenizers: Tokenizers,
        on_count_ahead: Callable[[], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_plan: Callable[[str], None] | None = None,
    ):
        """`on_count_ahead`: called when a helper starts counting a cold request ahead.
        `on_error`: called with the fallback taken ("trim" or "unchanged") when the pipeline
        raised while planning a request."""
        self.settings = settings
        self.tokenizers = tokenizers
        self.on_error = on_error
        self.policy = Policy(
            tool_max_tokens=settings.tool_max_tokens,
            tool_window_share=settings.tool_window_share,
            keep_last=settings.keep_last,
            trim_step=settings.trim_step,
            trim_keep_tokens=settings.trim_keep_tokens,
            marker_role=settings.marker_role,
            mode=settings.mode,
            summary_tokens=summary_room(settings.summary_max_tokens),
            facts_tokens=settings.facts_tokens,
            facts_window_share=settings.facts_window_share,
            facts_min_tokens=settings.facts_min_tokens,
            cut_latest_user=settings.cut_latest_user,
            retrieve=settings.retrieve,
        )
        # After a pipeline error: no stage-1 compaction, no facts, no refs (see _fallback).
        self.safe_policy = dataclasses.replace(
            self.policy, tool_max_tokens=UNLIMITED, facts_tokens=0, mode="trim", retrieve=False
        )
        self.memo = CompactMemo(4096, int(settings.memo_mb * 1_000_000))
        # Worker processes share the machine's cores: each counts ahead only on its share.
        self.ahead = CountAhead(
            max(1, (os.cpu_count() or 1) // max(1, settings.workers)), on_count_ahead
        )
        self._limiter: anyio.CapacityLimiter | None = None
        self.pool = PlanPool(settings)
        self.queued = 0  # bytes of bodies waiting for or in a thread's or process's planning
        self.on_plan = on_plan

    async def plan_request(
        self,
        raw: bytes,
        mode: Mode,
        window_of: Callable[[str | None], Awaitable[int | None]],
        request_id: str | None = None,
        full: bool = False,
        fmt: WireFormat = CHAT_WIRE,
    ) -> tuple[dict[str, Any], Plan]:
        """Parse and plan a request's bytes (wire format `fmt`) where that costs the other
        requests least: inline when cheap; in a thread when it is not; in a planner process
        when the body is so big that parsing it alone would hold the GIL for too long
        (`proxy.planner`).
        `window_of(model)`: the window to plan for (window discovery, awaited here). `full`:
        the plan's messages even when unchanged (a planner process otherwise sends back only
        the changed ones: the client's bytes are forwarded then)."""
        size = len(raw)
        if self.pool.enabled and size >= self.settings.process_min_bytes:
            with self._queue(size):
                guessed = guess_model(raw)
                window = await window_of(guessed)
                done = await self.pool.plan(raw, mode, window, request_id, full, fmt.name)
                if done is not None:
                    model = done[0].get("model")
                    real = model if isinstance(model, str) else None
                    if real != guessed and (right := await window_of(real)) != window:
                        done = await self.pool.plan(raw, mode, right, request_id, full, fmt.name)
                if done is not None:
                    self._placed("process")
                    return done
                return await self._threaded(raw, mode, window, request_id, fmt)
        body = fmt.parse(raw)
        model = body.get("model") if isinstance(body.get("model"), str) else None
        window = await window_of(model)
        plan = self.plan_inline(body, size, mode, window, request_id, fmt)
        if plan is not None:
            self._placed("inline")
            return body, plan
        del body  # a cold request waits for a worker thread holding only its bytes
        with self._queue(size):
            return await self._threaded(raw, mode, window, request_id, fmt)

    async def _threaded(
        self,
        raw: bytes,
        mode: Mode,
        window: int | None,
        request_id: str | None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> tuple[dict[str, Any], Plan]:
        self._placed("thread")
        return await self.plan_raw(raw, mode, window, request_id, fmt)

    @contextlib.contextmanager
    def _queue(self, size: int) -> Iterator[None]:
        """Hold `size` bytes against SHRINK_MAX_QUEUED_BYTES while they wait and are planned."""
        if self.queued and self.queued + size > self.settings.max_queued_bytes:
            self._placed("overloaded")
            raise Overloaded(
                f"shrink-proxy is already planning {self.queued:,} bytes of requests (limit "
                f"{self.settings.max_queued_bytes:,}); retry shortly.",
                headers={"retry-after": "1"},
            )
        self.queued += size
        try:
            yield
        finally:
            self.queued -= size

    def _placed(self, where: str) -> None:
        if self.on_plan is not None:
            self.on_plan(where)

    def close(self) -> None:
        self.pool.close()

    def _work(self, chars: int) -> Work:
        """The budget stage 1 has for one tool result of `chars` characters."""
        s = self.settings
        return TimeBudget(s.work_budget + s.work_budget_per_mb * chars / 1e6)

    def _threads(self) -> anyio.CapacityLimiter:
        """Cold requests are shrunk in at most one worker thread per core: the work is Python
        holding the GIL (and tiktoken, which scales ~1.3x on two cores), so more threads only
        queue inside the interpreter, each with its own malloc arena (bench/overhead: RSS after
        64 concurrent cold 160 KB requests)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(max(1, os.cpu_count() or 1))
        return self._limiter

    def plan_sync(
        self,
        body: dict[str, Any],
        mode: Mode,
        window: int | None = None,
        counter: CallCounter | None = None,
        ahead: bool = True,
        request_id: str | None = None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> Plan:
        """`window`: the served window when known (discovered, or stated by an overflow error).
        `counter`: counts already looked up for this request (see `plan`). `ahead`: whether long
        tool results not yet counted may be counted on a spare core (`proxy.ahead`); a plan
        run inline has too little new text for that to pay. `request_id`: for the log, should
        the pipeline fail."""
        mode, held = fmt.plan_mode(body, mode)
        try:
            plan = self._plan(body, mode, window, counter, ahead, fmt)
        except Exception as exc:  # a bug, whatever the input: see _degraded
            plan = self._degraded(body, mode, window, exc, request_id, fmt)
        if held:
            plan.report.count(SERVER_HISTORY)
            plan.report.notes.append("history held upstream: only tool outputs compacted")
        return plan

    def _budget(
        self, body: dict[str, Any], window: int | None, exact: bool, fmt: WireFormat = CHAT_WIRE
    ) -> Budget:
        s = self.settings
        model = body.get("model") if isinstance(body.get("model"), str) else None
        window = window or s.window_for(model)
        return compute_budget(
            window,
            fmt.completion_tokens(body, window),
            default_reserve=s.completion_reserve,
            floor=s.min_prompt_budget,
            margin_share=s.safety_margin if exact else s.estimate_safety_margin,
        )

    def _plan(
        self,
        body: dict[str, Any],
        mode: Mode,
        window: int | None,
        counter: CallCounter | None,
        ahead: bool,
        fmt: WireFormat = CHAT_WIRE,
    ) -> Plan:
        model = body.get("model") if isinstance(body.get("model"), str) else None
        tokens = self.tokenizers.for_model(model)
        budget = self._budget(body, window, tokens.exact, fmt)
        limit = self.policy.tool_limit(budget.window)
        messages = fmt.conversation(body)
        texts = [] if mode == "off" or not ahead else tool_texts(messages, limit, fmt.dialect)
        # Room for the retrieval tool, whether or not it is added: the plan is then the same
        # with it and without it (a client turning it off per request moves no cut).
        tool = fmt.tool_room(body, tokens) if self.policy.retrieve and mode != "off" else 0
        with self.ahead.planning(tokens, texts):
            plan = shrink(
                messages,
                budget=budget,
                counter=counter or CallCounter(fmt.counter(tokens)),
                policy=self.policy,
                mode=mode,
                fixed_tokens=fmt.fixed_tokens(body, tokens) + tool,
                memo=self.memo,
                work=self._work,
                dialect=fmt.dialect,
            )
        return with_tool(plan, tool)

    def _degraded(
        self,
        body: dict[str, Any],
        mode: Mode,
        window: int | None,
        exc: Exception,
        rid: str | None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> Plan:
        """The plan of a request the pipeline raised on: pass-through-or-fit, never an error.

        Stage 1 and the facts hold most of the pipeline's code (every text rule, the JSON
        walks), so the request is planned again without them, by stage 2's cut and stage 3's
        plain head+tail; a request that still does not fit, or a mode that does not trim, or a
        second failure, is sent unchanged (the backend then says whether it fits). Logged once,
        with the exception's type and where it was raised: its message may quote content."""
        plan = None
        if mode in ("auto", "trim", "compact"):
            try:
                plan = self._fallback(body, window, fmt)
            except Exception:
                plan = None
        if plan is not None and plan.report.fits:
            outcome, said = "trim", "planned again without stage 1, facts or summary"
        else:
            plan = Plan(fmt.conversation(body), Report(), changed=False)
            outcome, said = "unchanged", "sent unchanged"
        where = _raised_at(exc)
        plan.report.count("fallback")
        plan.report.notes.append(f"pipeline error ({type(exc).__name__} at {where}); {said}")
        log.error(
            "pipeline error; request %s",
            said,
            extra={
                "fields": {
                    "request_id": rid,
                    "error": type(exc).__name__,
                    "at": where,
                    "fallback": outcome,
                }
            },
        )
        if self.on_error is not None:
            self.on_error(outcome)
        return plan

    def _fallback(
        self, body: dict[str, Any], window: int | None, fmt: WireFormat = CHAT_WIRE
    ) -> Plan:
        """Stages 2 and 3 alone: mode trim with a tool limit past any text (the budget's window
        stretched with it: the limit is also a share of the window) and no facts; no memo, and
        no span for a summary, whose facts would be read again."""
        model = body.get("model") if isinstance(body.get("model"), str) else None
        tokens = self.tokenizers.for_model(model)
        budget = self._budget(body, window, tokens.exact, fmt)
        plan = shrink(
            fmt.conversation(body),
            budget=dataclasses.replace(budget, window=UNLIMITED),
            counter=CallCounter(fmt.counter(tokens)),
            policy=self.safe_policy,
            mode="trim",
            fixed_tokens=fmt.fixed_tokens(body, tokens),
            dialect=fmt.dialect,
        )
        plan.report.window = budget.window
        return dataclasses.replace(plan, span=[], marker_index=None)

    async def plan(
        self,
        body: dict[str, Any],
        raw_size: int,
        mode: Mode,
        window: int | None = None,
        request_id: str | None = None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> Plan:
        plan, counter = self._inline(body, raw_size, mode, window, request_id, fmt)
        if plan is not None:
            return plan
        return await anyio.to_thread.run_sync(
            self.plan_sync,
            body,
            mode,
            window,
            counter,
            True,
            request_id,
            fmt,
            limiter=self._threads(),
        )

    def plan_inline(
        self,
        body: dict[str, Any],
        raw_size: int,
        mode: Mode,
        window: int | None = None,
        request_id: str | None = None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> Plan | None:
        """The plan, when it is cheap enough for the event loop; None when it needs `plan_raw`."""
        return self._inline(body, raw_size, mode, window, request_id, fmt)[0]

    async def plan_raw(
        self,
        raw: bytes,
        mode: Mode,
        window: int | None = None,
        request_id: str | None = None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> tuple[dict[str, Any], Plan]:
        """Parse and plan in a worker thread: the body and its plan.

        For a request `plan_inline` declined. Cold requests queue for the few worker threads,
        and one waiting with its parsed body holds ~1.1x its bytes in small objects (a 192 KB
        conversation: 215 KB) that 64 waiting requests interleave across the heap; waiting with
        only the client's bytes (one block) and parsing again in the thread (0.1 ms for that
        body) keeps peak RSS down (bench/overhead, c=64 cold)."""

        def work() -> tuple[dict[str, Any], Plan]:
            body = fmt.parse(raw)
            return body, self.plan_sync(body, mode, window, request_id=request_id, fmt=fmt)

        return await anyio.to_thread.run_sync(work, limiter=self._threads())

    def _inline(
        self,
        body: dict[str, Any],
        raw_size: int,
        mode: Mode,
        window: int | None,
        rid: str | None,
        fmt: WireFormat = CHAT_WIRE,
    ) -> tuple[Plan | None, CallCounter | None]:
        """The plan when it runs inline, else the counts already looked up (for the thread)."""
        model = body.get("model") if isinstance(body.get("model"), str) else None
        # An encoding not loaded yet is read and built first (tens of ms): never on the loop.
        if not self.tokenizers.loaded(model):
            return None, None
        if raw_size < THREAD_THRESHOLD:
            return self.plan_sync(body, mode, window, ahead=False, request_id=rid, fmt=fmt), None
        if len(fmt.conversation(body)) > INLINE_MAX_MESSAGES:
            return None, None
        counter, new_chars = self._look_up(fmt.conversation(body), model, fmt)
        if new_chars < THREAD_THRESHOLD and mode != "off":
            limit = self.policy.tool_limit(window or self.settings.window_for(model))
            new_chars += self._uncompacted(fmt.conversation(body), limit, counter, fmt)
        if new_chars < THREAD_THRESHOLD:
            return self.plan_sync(body, mode, window, counter, False, rid, fmt), None
        return None, counter

    def _uncompacted(
        self, messages: list[Any], limit: int, counter: CallCounter, fmt: WireFormat = CHAT_WIRE
    ) -> int:
        """Characters of the long tool results whose stage-1 result is not in the memo. The
        memo holds fewer results than the counter holds counts, so a request can be warm by
        its counts and still have its tool results to compact again: as costly as new text
        (bench/overhead's large body after 128 cold ones had evicted it: 45 ms inline)."""
        texts = tool_texts(messages, limit, fmt.dialect)
        retrieve = self.policy.retrieve
        return sum(
            len(t) for t in texts if compact_key(t, limit, counter, retrieve) not in self.memo
        )

    def _look_up(
        self, messages: list[Any], model: str | None, fmt: WireFormat = CHAT_WIRE
    ) -> tuple[CallCounter, int]:
        """The cached counts of `messages`, and roughly how much of their text has none (string
        lengths, up to THREAD_THRESHOLD): a warm request, however long, has little."""
        tokens = fmt.counter(self.tokenizers.for_model(model))
        counter = CallCounter(tokens)
        new_chars = 0
        for m in messages:
            key = counter.key_of(m)  # a long content's key is kept for stage 1's look-up
            n = tokens.cached_count(m, key)
            if n is not None:
                counter.remember(m, n, key)
                continue
            # A Responses call's result keeps its text in `output`.
            content = m.get("content") if "content" in m else m.get("output")
            new_chars += len(content) if isinstance(content, str) else len(str(content))
            if new_chars >= THREAD_THRESHOLD:
                break
        return counter, new_chars


class TimeBudget:
    """A work budget in seconds of wall time from its creation (proxy.pipeline.work)."""

    __slots__ = ("deadline",)

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds

    def check(self) -> None:
        if time.perf_counter() > self.deadline:
            raise WorkExceeded


def _raised_at(exc: BaseException) -> str:
    """Where `exc` was raised: the innermost frame in the proxy's own code
    (`proxy/pipeline/facts.py:178 in _strings`), else the innermost of all. Frames only: no
    source line, no message, no local."""
    package = f"{os.sep}proxy{os.sep}"
    frames = [(f.f_code, line) for f, line in traceback.walk_tb(exc.__traceback__)]
    ours = [(code, line) for code, line in frames if package in code.co_filename]
    if not (ours or frames):
        return "?"
    code, line = (ours or frames)[-1]
    path = code.co_filename
    at = path.rfind(package)
    path = path[at + 1 :] if at >= 0 else os.path.basename(path)
    return f"{path}:{line} in {code.co_name}"
