"""Counting ahead: a cold request's long tool results are counted on a spare core while the
pipeline reads them.

Stage 1 reads each long tool result (scores, runs, outline) and counts it; both cost about the
same. tiktoken releases the GIL while it encodes, so a helper thread that counts the texts in the
order stage 1 meets them runs beside the reading instead of after it. The counter's single
flight (`TokenCounter._cached`) has each text counted once, by whichever thread gets to it
first, so results never depend on the helper: only their latency does.

A helper runs only when a core is spare: while every core is already planning a request (many
concurrent cold requests), one more thread would only queue inside the interpreter.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from proxy.tokens import TokenCounter

log = logging.getLogger(__name__)

# Below this many characters still to count, the helper's thread hop costs more than it saves.
MIN_CHARS = 32 * 1024


class CountAhead:
    def __init__(self, cores: int | None = None, on_start: Callable[[], None] | None = None):
        """`on_start`: called as each helper starts (the `/metrics` counter)."""
        self.cores = cores or os.cpu_count() or 1
        self.on_start = on_start
        self._lock = threading.Lock()
        self._busy = 0  # plans running under `planning`, plus helpers running
        self._pool: ThreadPoolExecutor | None = None
        self.started = 0  # helpers started
        self.failed = 0  # helpers that raised

    @contextmanager
    def planning(self, counter: TokenCounter, texts: Sequence[str]) -> Iterator[None]:
        """Around one pipeline run: count `texts` (those stage 1 will count) on a spare core
        meanwhile, when they are worth it; the helper stops when the run ends."""
        todo = counter.uncounted(texts) if counter.exact and self.cores > 1 else []
        with self._lock:
            self._busy += 1
            helper = bool(todo) and sum(map(len, todo)) >= MIN_CHARS and self._busy < self.cores
            if helper:
                self._busy += 1
                self.started += 1
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.cores - 1, "shrink-count-ahead")
        stop = threading.Event() if helper else None
        if stop is not None:
            assert self._pool is not None
            if self.on_start is not None:
                self.on_start()
            self._pool.submit(self._count, counter, todo, stop)
        try:
            yield
        finally:
            if stop is not None:
                stop.set()
            with self._lock:
                self._busy -= 1

    def _count(self, counter: TokenCounter, texts: list[str], stop: threading.Event) -> None:
        try:
            for text in texts:
                if stop.is_set():
                    break
                counter.count_text(text)
        except Exception:
            # Only latency is lost: the plan makes every count it does not find. The plan meets
            # the same error itself if it is not the helper's own.
            with self._lock:
                self.failed += 1
            log.warning("counting ahead failed; the plan counts those texts itself", exc_info=True)
        finally:
            with self._lock:
                self._busy -= 1
