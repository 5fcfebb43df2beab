"""Planning big requests in worker processes, so that no request stalls the others.

Threads share the GIL, and the longest steps of planning a big request are single C calls that
hold it: parsing a 60 MB body takes orjson ~200 ms, a million small messages ~650 ms, and no
other client's request moves meanwhile. A request of `SHRINK_PROCESS_MIN_BYTES` or more is
therefore never parsed in the serving process: its bytes go to a planner process (a
ProcessPoolExecutor of `SHRINK_PLAN_PROCESSES`, started on first use), which parses and plans it
with its own caches and sends back the plan and the body without its messages (the plan's, when
it changed them). The serving process keeps the client's bytes, which it forwards unchanged when
the plan changed nothing. Processes are spawned (never forked from a running event loop).

Each planner process holds one `Shrinker` of its own: module state, but only in the planner
processes, built by their initializer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from proxy.errors import InvalidRequest, ProxyError

if TYPE_CHECKING:
    from proxy.pipeline import Plan
    from proxy.pipeline.types import Mode
    from proxy.settings import Settings
    from proxy.shrinker import Shrinker

log = logging.getLogger(__name__)

# The model a request names, read off its bytes (it decides the window, which the serving
# process discovers before planning): a top-level key, so the last one the scan meets that is
# not inside a string. The planner checks it against the parsed body.
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\\n]|\\.){1,256}+)"')

_WORKER: Shrinker | None = None  # in a planner process only


def guess_model(raw: bytes) -> str | None:
    """The model a request body names, without parsing it (None when none is found)."""
    found = None
    for m in _MODEL.finditer(raw, 0, min(len(raw), 1 << 16)):
        found = m
    if found is None and len(raw) > 1 << 16:
        for m in _MODEL.finditer(raw, len(raw) - (1 << 16)):
            found = m
    if found is None:
        return None
    try:
        model = json.loads(b'"' + found.group(1) + b'"')
    except ValueError:
        return None
    return model if isinstance(model, str) else None


def _start(settings: Settings) -> None:
    """A planner process's initializer: its own tokenizers, caches and shrinker."""
    global _WORKER
    from proxy.app import build_tokenizers
    from proxy.shrinker import Shrinker

    _WORKER = Shrinker(settings, build_tokenizers(settings))


def _plan(
    raw: bytes,
    mode: Mode,
    window: int | None,
    request_id: str | None,
    keep_span: bool,
    full: bool,
    wire_name: str = "chat",
) -> tuple[dict[str, Any], Plan] | tuple[str, str, str | None]:
    """Parse and plan in a planner process: (body without its messages, plan), or
    ("error", message, param) for a body the wire refuses. `wire_name`: its format."""
    from proxy.wire.formats import FORMATS

    assert _WORKER is not None
    fmt = FORMATS[wire_name]
    try:
        body = fmt.parse(raw)
    except ProxyError as exc:
        return "error", exc.message, exc.param
    plan = _WORKER.plan_sync(body, mode, window, request_id=request_id, fmt=fmt)
    light = dict(body)
    # What goes back is what the serving process needs: the plan's messages when it changed
    # them (a shrunk list), and the client's own only when a stream's options may have to be
    # rewritten into them (see routes: splice_stream_usage).
    keep = full or plan.changed or (body.get("stream") is True and "stream_options" in body)
    light[fmt.field] = plan.messages if keep else []
    if not keep_span:
        plan.span = []
    if not plan.changed:
        plan.messages = light[fmt.field]
    return light, plan


class PlanPool:
    """Worker processes that plan big requests (see the module's docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.processes = settings.plan_processes
        self._pool: ProcessPoolExecutor | None = None

    @property
    def enabled(self) -> bool:
        return self.processes > 0

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.settings,),
            )
        return self._pool

    async def plan(
        self,
        raw: bytes,
        mode: Mode,
        window: int | None,
        request_id: str | None,
        full: bool = False,
        wire_name: str = "chat",
    ) -> tuple[dict[str, Any], Plan] | None:
        """(body without its messages, plan), or None when the pool broke (a planner process
        died): the caller plans in-process instead, and the next request starts a new pool."""
        loop = asyncio.get_running_loop()
        try:
            done = await loop.run_in_executor(
                self._executor(),
                _plan,
                raw,
                mode,
                window,
                request_id,
                mode == "compact",
                full,
                wire_name,
            )
        except BrokenProcessPool:
            log.error("a planner process died; planning in-process", extra={"fields": {}})
            self.close()
            return None
        if done[0] == "error":
            _, message, param = done
            raise InvalidRequest(str(message), param=param)
        return done  # type: ignore[return-value]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
