"""Runs: consecutive lines that say the same thing, so all but their ends can go first.

Progress bars redraw with `\r`, test runners print one near-identical PASSED line per test,
package managers one `Downloading ...` or `GET 200 ...` line per file. Such runs cost many tokens
and tell the model little beyond "this happened N times". Lines are compared after masking the
numbers that vary between them (counts, sizes, percentages, versions); two masked lines are
similar when they share most of their text at both ends.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_VARYING = re.compile(r"[0-9]+(?:[.,:][0-9]+)*")  # numbers, versions, sizes, times, ids
_MIN_RUN = 3  # a run shorter than this saves nothing once it needs a marker line
_SIMILAR_SHARE = 0.7  # prefix + suffix shared by two masked lines, relative to the longer one


def last_redraw(line: str) -> str:
    """What a terminal finally showed for a line that redraws itself with carriage returns."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix by bisection over C-level slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def similar(a: str, b: str) -> bool:
    """Two masked, non-blank lines that differ only in a small middle part."""
    if a == b:
        return bool(a.strip())
    if not a.strip() or not b.strip():
        return False
    longest = max(len(a), len(b))
    prefix = _common_prefix(a, b)
    if prefix < 4:
        return False
    suffix = _common_suffix(a, b, min(len(a), len(b)) - prefix)
    return prefix + suffix >= _SIMILAR_SHARE * longest


def find_runs(lines: Sequence[str]) -> tuple[list[bool], list[int]]:
    """Mark exact repeats to drop and runs of similar lines.

    Returns `dup` (True for the second and later copies in a run of at least three identical
    lines: they are never kept) and `run` (an id shared by the lines of each run of at least three
    similar lines, -1 elsewhere).
    """
    n = len(lines)
    dup = [False] * n
    run = [-1] * n
    masked = _VARYING.sub("0", "\n".join(lines)).split("\n")
    start = 0
    for i in range(1, n + 1):
        if i < n and similar(masked[i - 1], masked[i]):
            continue
        if i - start >= _MIN_RUN:
            for j in range(start, i):
                run[j] = start
        start = i
    start = 0
    for i in range(1, n + 1):
        if i < n and lines[i] == lines[i - 1]:
            continue
        if i - start >= _MIN_RUN:
            for j in range(start + 1, i):
                dup[j] = True
        start = i
    return dup, run
