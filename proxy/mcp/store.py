"""The bounded store of command outputs that `read_output` pages through.

`run_compact_command` shows the model a compacted view; the text it was compacted from is kept
here under an `output_ref`, so whatever the markers elided can be read back, a page at a time.
The store is bounded three ways (outputs, bytes in memory, age), oldest first out, and it remembers
the refs it let go of (a bounded list), so an expired ref gets a clear answer instead of a
bare "unknown". Pages are bounded by lines and by UTF-8 bytes; a page says which bound cut it.

No I/O and no settings: the caller passes the bounds. Thread-safe (a lock around the index).
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from proxy.retrieval.pages import Output, Page, read_page

__all__ = ["Output", "OutputGone", "OutputStore", "Page"]

FORGOTTEN_REFS = 1024  # refs let go of, remembered to explain why


class OutputGone(LookupError):
    """The ref is not (or no longer) in the store; the message says which and why."""


class OutputStore:
    def __init__(
        self,
        max_outputs: int,
        max_bytes: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_outputs = max(1, max_outputs)
        self.max_bytes = max(1, max_bytes)
        self.ttl = ttl
        self.clock = clock
        self._outputs: OrderedDict[str, Output] = OrderedDict()
        self._bytes = 0  # as the texts take memory (1 to 4 bytes a character: sys.getsizeof)
        self._gone: OrderedDict[str, str] = OrderedDict()  # ref -> why it went
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._outputs)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, command: str, text: str) -> str | None:
        """Keep `text`; its ref, or None when it alone is larger than the whole store."""
        size = sys.getsizeof(text)
        if size > self.max_bytes:
            return None
        ref = "out-" + secrets.token_hex(6)
        with self._lock:
            self._expire()
            self._outputs[ref] = Output(ref, command, text, self.clock())
            self._bytes += size
            while len(self._outputs) > self.max_outputs or self._bytes > self.max_bytes:
                old, _ = next(iter(self._outputs.items()))
                self._drop(
                    old,
                    f"evicted to make room (the store keeps {self.max_outputs} outputs and "
                    f"{self.max_bytes:,} bytes)",
                )
        return ref

    def get(self, ref: str) -> Output:
        with self._lock:
            self._expire()
            out = self._outputs.get(ref)
            if out is not None:
                return out
            why = self._gone.get(ref)
        if why is not None:
            raise OutputGone(f"output {ref} is no longer kept: {why}. Run the command again.")
        raise OutputGone(
            f"no output {ref!r} in this server (refs are kept in memory by the server that ran "
            "the command, and a restart forgets them). Run the command again."
        )

    def read(
        self,
        ref: str,
        start_line: int = 1,
        end_line: int | None = None,
        grep: str | None = None,
        *,
        max_lines: int,
        max_bytes: int,
    ) -> Page:
        """A page of an output (`proxy.retrieval.pages.read_page`)."""
        return read_page(
            self.get(ref), start_line, end_line, grep, max_lines=max_lines, max_bytes=max_bytes
        )

    def _expire(self) -> None:
        limit = self.clock() - self.ttl
        while self._outputs:
            ref, out = next(iter(self._outputs.items()))
            if out.created >= limit:
                break
            self._drop(ref, f"expired (outputs are kept for {self.ttl:g} s)")

    def _drop(self, ref: str, why: str) -> None:
        out = self._outputs.pop(ref)
        self._bytes -= sys.getsizeof(out.text)
        self._gone[ref] = why
        while len(self._gone) > FORGOTTEN_REFS:
            self._gone.popitem(last=False)
