"""Pages of a kept text: lines by number, or the lines holding a search string, bounded by
lines and by UTF-8 bytes (a page says which bound cut it). Shared by the MCP server's
`read_output`, `GET /v1/retrieve/{hash}` and the in-flight `shrink_retrieve` tool."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any


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


def read_page(
    out: Output,
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
    ref = out.ref
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


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` of at most `max_bytes` UTF-8 bytes."""
    raw = text.encode("utf-8", "surrogatepass")[: max(0, max_bytes)]
    return raw.decode("utf-8", "ignore")
