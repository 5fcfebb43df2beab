"""The bounded store of command outputs that `read_output` pages through.

`run_compact_command` shows the model a compacted view; the text it was compacted from is kept
here under an `output_ref`, so whatever the markers elided can be read back, a page at a time.
The store is bounded three ways (outputs, characters, age), oldest first out, and it remembers
the refs it let go of (a bounded list), so an expired ref gets a clear answer instead of a
bare "unknown". Pages are bounded by lines and by UTF-8 bytes; a page says which bound cut it.

No I/O and no settings: the caller passes the bounds. Thread-safe (a lock around the index).
"""

from __future__ import annotations

import secrets
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FORGOTTEN_REFS = 1024  # refs let go of, remembered to explain why


class OutputGone(LookupError):
    """The ref is not (or no longer) in the store; the message says which and why."""


@dataclass
class Output:
    ref: str
    command: str
    text: str
    created: float
    _starts: array | None = field(default=None, repr=False)  # offset of each line's start

    @property
    def size(self) -> int:
        return len(self.text)

    def starts(self) -> array:
        if self._starts is None:
            starts = array("q", [0])
            find, text, at = self.text.find, self.text, 0
            while (at := find("\n", at) + 1) > 0:
                starts.append(at)
            if len(text) and starts[-1] == len(text):  # a final newline ends, not starts, a line
                starts.pop()
            self._starts = starts
        return self._starts

    def line_count(self) -> int:
        return len(self.starts()) if self.text else 0

    def line(self, n: int) -> str:
        """Line `n` (1-based), without its newline."""
        starts = self.starts()
        begin = starts[n - 1]
        end = starts[n] - 1 if n < len(starts) else len(self.text)
        return self.text[begin:end].removesuffix("\n")


@dataclass(frozen=True)
class Page:
    ref: str
    start_line: int
    end_line: int  # last line returned (start_line - 1 when none)
    total_lines: int
    text: str
    next_start_line: int | None  # the line after this page; None at the end of the output
    truncated_by: str | None  # "lines" | "bytes" | None
    omitted_bytes: int  # bytes of a line longer than a page that it did not return
    matches: int | None = None  # lines matching `grep`, in the lines scanned

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "text"} | {"text": self.text}


class OutputStore:
    def __init__(
        self,
        max_outputs: int,
        max_chars: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_outputs = max(1, max_outputs)
        self.max_chars = max(1, max_chars)
        self.ttl = ttl
        self.clock = clock
        self._outputs: OrderedDict[str, Output] = OrderedDict()
        self._chars = 0
        self._gone: OrderedDict[str, str] = OrderedDict()  # ref -> why it went
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._outputs)

    @property
    def chars(self) -> int:
        return self._chars

    def put(self, command: str, text: str) -> str | None:
        """Keep `text`; its ref, or None when it alone is larger than the whole store."""
        if len(text) > self.max_chars:
            return None
        ref = "out-" + secrets.token_hex(6)
        with self._lock:
            self._expire()
            self._outputs[ref] = Output(ref, command, text, self.clock())
            self._chars += len(text)
            while len(self._outputs) > self.max_outputs or self._chars > self.max_chars:
                old, _ = next(iter(self._outputs.items()))
                self._drop(
                    old,
                    f"evicted to make room (the store keeps {self.max_outputs} outputs and "
                    f"{self.max_chars:,} characters)",
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
        """Lines start_line..end_line (1-based, inclusive) of an output, at most `max_lines`
        lines and `max_bytes` UTF-8 bytes; with `grep`, only the lines in that range holding one
        of its `|`-separated literals (case-insensitive), each prefixed with its number."""
        out = self.get(ref)
        total = out.line_count()
        start = max(1, start_line)
        last = total if end_line is None else min(end_line, total)
        needles = [n for n in (grep or "").lower().split("|") if n] if grep else []
        lines: list[str] = []
        used = omitted = 0
        truncated: str | None = None
        matches = 0 if grep else None
        n = start
        end = start - 1
        while n <= last:
            line = out.line(n)
            if needles:
                low = line.lower()
                if not any(x in low for x in needles):
                    n += 1
                    end = n - 1
                    continue
                matches = (matches or 0) + 1
                line = f"{n}: {line}"
            if len(lines) >= max_lines:
                truncated = "lines"
                break
            size = len(line.encode("utf-8", "surrogatepass")) + 1
            if used + size > max_bytes:
                if lines:
                    truncated = "bytes"
                    break
                # One line longer than a page: its head, and the rest counted.
                cut = _utf8_prefix(line, max_bytes - 1)
                omitted += size - 1 - len(cut.encode("utf-8", "surrogatepass"))
                line, size, truncated = cut, max_bytes, "bytes"
            lines.append(line)
            used += size
            end = n
            n += 1
        following = n if n <= total else None
        return Page(
            ref,
            start,
            end,
            total,
            "\n".join(lines),
            following,
            truncated,
            omitted,
            matches,
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
        self._chars -= out.size
        self._gone[ref] = why
        while len(self._gone) > FORGOTTEN_REFS:
            self._gone.popitem(last=False)


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` of at most `max_bytes` UTF-8 bytes."""
    raw = text.encode("utf-8", "surrogatepass")[: max(0, max_bytes)]
    return raw.decode("utf-8", "ignore")
