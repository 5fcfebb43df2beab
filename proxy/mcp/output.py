"""What a command printed, as the model reads it: decoded, cleaned, compacted by stage 1.

Boundary: a `Run` (bytes) in; the text to keep (for `read_output`) and the compacted view out.
Bytes that are not UTF-8 are decoded with U+FFFD in their place; terminal colour and cursor
sequences (ANSI CSI/OSC) go, as do the frames of a line that redraws itself with carriage
returns (only what the terminal finally showed is kept). Then the proxy's own stage 1
(`compact_text`, the same rules and markers as a tool result in a request), within a work budget
like the proxy's: past it, a plain head+tail cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from proxy.mcp.runner import Run
from proxy.pipeline.compact import compact_text
from proxy.pipeline.last_resort import shrink_text_head_tail
from proxy.pipeline.work import WorkExceeded
from proxy.shrinker import TimeBudget

# CSI (colours, cursor moves), OSC (titles, links; bounded, so an unterminated one stays
# linear), and the two-byte escapes. Each alternative is a fixed prefix and disjoint classes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
)
BINARY_SAMPLE = 8192


@dataclass(frozen=True)
class View:
    kept: str  # the whole text held (head, a gap line, tail), for read_output
    text: str  # what the model is shown
    tokens_before: int
    tokens_after: int
    lines: int
    binary: bool


def decode(run: Run) -> tuple[str, bool]:
    """The text held of a run, the gap (bytes not kept) said on a line of its own; and whether
    the output looked binary (NUL bytes near its start)."""
    binary = b"\x00" in run.head[:BINARY_SAMPLE]
    head = clean(run.head.decode("utf-8", "replace"))
    if not run.omitted_bytes:
        return head, binary
    tail = clean(run.tail.decode("utf-8", "replace"))
    gap = (
        f"[... {run.omitted_bytes:,} bytes of output not kept by shrink-proxy (over "
        f"SHRINK_MCP_OUTPUT_MAX_BYTES: the first and last {len(run.head):,} bytes are) ...]"
    )
    return f"{head.rstrip(chr(10))}\n{gap}\n{tail}", binary


def clean(text: str) -> str:
    """`text` without terminal escape sequences, and each line redrawn with `\\r` as shown."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            frames = [f for f in line.split("\r") if f.strip()]
            lines[i] = frames[-1] if frames else ""
    return "\n".join(lines)


def compact(
    kept: str,
    max_tokens: int,
    count: Callable[[str], int],
    work_seconds: float,
    binary: bool = False,
) -> View:
    """Stage 1 of `kept` to at most `max_tokens` tokens (unchanged when it already fits)."""
    lines = kept.count("\n") + (0 if kept.endswith("\n") or not kept else 1)
    try:
        done = compact_text(kept, max_tokens, count, TimeBudget(work_seconds))
    except WorkExceeded:
        text = shrink_text_head_tail(kept, max_tokens, count)
        return View(kept, text, count(kept), count(text), lines, binary)
    if done is None:
        n = count(kept)
        return View(kept, kept, n, n, lines, binary)
    return View(kept, done.text, done.tokens_before, done.tokens_after, lines, binary)
