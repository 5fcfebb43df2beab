"""Compaction of oversized tool results: stage 1 of the pipeline, one text at a time.

Coding agents fill their context with install logs, verbose test runs, listings and JSON dumps.
`compact_text` rewrites one such text to fit a token budget while keeping what a model needs
(verdicts, errors, the tail) and saying, with a marker, what it removed. The result depends only
on (text, max_tokens, count): the same output is cut identically on every turn, so backend prefix
caches survive. JSON goes to `jsonish`, everything else to `lines`; if neither can fit, the middle
of the text is cut by characters as a last resort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.pipeline.compact import digest, markers
from proxy.pipeline.compact.jsonish import compact_json, parse
from proxy.pipeline.compact.lines import compact_lines, read
from proxy.pipeline.work import Work, check

__all__ = ["Compacted", "compact_text"]

Count = Callable[[str], int]

# Characters per token of the limit above which a text is read before it is counted.
_READ_FIRST = 8


@dataclass(frozen=True)
class Compacted:
    text: str
    kind: str  # "log" | "json" | "text"
    tokens_before: int
    tokens_after: int
    omitted_lines: int  # lines elided (0 where not line-based)
    ref: str | None = None  # the ref of the original its footer names (proxy.pipeline.refs)


def _cut_chars(text: str, max_tokens: int, count: Count, tokens_before: int) -> tuple[str, int]:
    """Head and tail by characters around one marker, shrinking until it fits.

    Only reached when line-level compaction cannot fit (tiny budgets, pathological lines). Each
    try is smaller than the last by at least a fixed factor, so the counts add up to little.
    """
    per_token = len(text) / max(1, tokens_before)
    keep = int(max_tokens * per_token * 0.8)
    while keep > 0:
        head = keep * 3 // 5
        tail = keep - head
        gone = len(text) - head - tail
        note = markers.text_omitted(gone, max(1, round(gone / per_token)))
        out = f"{text[:head]}\n{note}\n{text[len(text) - tail :]}"
        tokens = count(out)
        if tokens <= max_tokens:
            return out, tokens
        keep = min(int(keep * max_tokens / tokens * 0.9), keep - 1)
    note = markers.text_omitted(len(text), tokens_before)
    tokens = count(note)
    if tokens <= max_tokens:
        return note, tokens
    # Below the size of a marker: a bare prefix is all that fits (max_tokens is tiny here).
    size = min(len(text), max(0, int(max_tokens * per_token)))
    while size > 0 and count(text[:size]) > max_tokens:
        size = size * 3 // 4
    return text[:size], count(text[:size])


def compact_text(
    text: str, max_tokens: int, count: Callable[[str], int], work: Work | None = None
) -> Compacted | None:
    """None when count(text) <= max_tokens (nothing to do).

    Otherwise the text rewritten to at most `max_tokens` tokens (guaranteed for budgets of 64 and
    more), never more tokens than it had, with a marker at every elision. `work`: checked
    between phases (`proxy.pipeline.work`); WorkExceeded goes to the caller.
    """
    budget = max(0, max_tokens)
    # Most texts a little over the byte bound are under the limit: counted first, they need no
    # more. A text of many characters per token of the limit is almost surely over it: it is
    # parsed and read first and counted last, as counting is the costliest step and the counter
    # may have it under way already (the edge counts long tool results ahead, on another core).
    before = None
    if len(text) <= _READ_FIRST * max(1, budget):
        before = count(text)
        if before <= max_tokens:
            return None
    huge = digest.needed(text)
    # None for JSON nested deeper than jsonish.MAX_DEPTH, or too big to rebuild: read as lines
    doc = None if huge else parse(text)
    check(work)
    brief = digest.digest(text, work=work) if huge else None
    reading = read(text if brief is None else brief.text) if doc is None else None
    check(work)
    if before is None:
        before = count(text)
        if before <= max_tokens:
            return None
    shrunk = None
    if doc is not None:
        shrunk = compact_json(doc, budget, count, before, work)
    if shrunk is not None and shrunk[1] <= budget:
        return Compacted(shrunk[0], "json", before, shrunk[1], 0)
    check(work)
    if brief is not None:
        per_char = before / max(1, len(text))
        result = compact_lines(brief.text, budget, count, reading, brief.gaps, per_char)
    else:
        result = compact_lines(text, budget, count, reading)
    if result is not None and result.tokens <= budget:
        return Compacted(result.text, result.kind, before, result.tokens, result.omitted_lines)
    out, after = _cut_chars(text, budget, count, before)
    return Compacted(out, "text", before, after, 0)
