"""Runs: consecutive lines that say the same thing, so all but their ends can go first.

Progress bars redraw with `\r`, test runners print one near-identical PASSED line per test,
package managers one `Downloading ...` or `GET 200 ...` line per file. Such runs cost many tokens
and tell the model little beyond "this happened N times". Lines are compared after masking the
numbers that vary between them (counts, sizes, percentages, versions); two masked lines are
similar when they share most of their text at both ends.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

# Numbers, versions, sizes, times, ids: `[0-9]+(?:[.,:][0-9]+)*` becomes one "0". Done on UTF-8
# bytes (no multi-byte character holds an ASCII digit): every digit becomes "0" by one table
# lookup in C, and only the numbers of two or more characters are then collapsed by the regex
# (a regex substitution costs a few hundred nanoseconds per match; most numbers are one digit).
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = re.compile(rb"0(?:0|[.,:]0)+")
_MIN_RUN = 3  # a run shorter than this saves nothing once it needs a marker line
_SIMILAR_SHARE = 0.7  # prefix + suffix shared by two masked lines, relative to the longer one


def last_redraw(line: str) -> str:
    """What a terminal finally showed for a line that redraws itself with carriage returns."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def mask(text: str) -> str:
    """`text` with every number (digits, optionally joined by `.`, `,` or `:`) replaced by "0"."""
    raw = text.encode("utf-8", "surrogatepass").translate(_DIGITS)
    return _LONG_NUMBER.sub(b"0", raw).decode("utf-8", "surrogatepass")


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by C-level operations only (no loop over characters)."""
    m = min(len(a), len(b))
    if a.isascii() and b.isascii():
        # The first differing byte is the highest one set in the XOR of the two as integers.
        x = int.from_bytes(a[:m].encode(), "big") ^ int.from_bytes(b[:m].encode(), "big")
        return m - (x.bit_length() + 7) // 8
    lo, hi = 0, m  # bisection over slice comparisons
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def similar(a: str, b: str) -> bool:
    """Two masked, non-blank lines that differ only in a small middle part: their common prefix
    and suffix (not overlapping) cover `_SIMILAR_SHARE` of the longer one, the prefix 4 or more.

    The cheap tests come first: most neighbouring lines differ in their first four characters
    or in length. Then only the prefix is measured; the suffix is tested at the one length that
    would complete the share.
    """
    if a == b:
        return bool(a.strip())
    if a[:4] != b[:4]:  # a common prefix shorter than 4 (a != b, so both have 4 or more)
        return False
    la, lb = len(a), len(b)
    longest, shortest = (la, lb) if la >= lb else (lb, la)
    need = math.ceil(_SIMILAR_SHARE * longest)  # prefix + suffix, integers, must reach this
    if shortest < need or a.isspace() or b.isspace():  # prefix + suffix <= shortest
        return False
    if a[:need] == b[:need]:
        return True
    rest = need - _common_prefix(a, b)  # >= 1, and <= shortest - prefix: no overlap
    return a[la - rest :] == b[lb - rest :]


def _spans(same: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal [start, end) spans of lines where each line is `same` as the one before it
    (`same[i]` compares line i + 1 with line i), of at least `_MIN_RUN` lines."""
    spans = []
    start = 0
    n = len(same) + 1
    i = 0
    while i < n - 1:
        if not same[i]:
            i += 1
            continue
        start = i
        while i < n - 1 and same[i]:
            i += 1
        if i + 1 - start >= _MIN_RUN:
            spans.append((start, i + 1))
    return spans


def find_runs(lines: Sequence[str]) -> tuple[list[bool], list[int]]:
    """Mark exact repeats to drop and runs of similar lines.

    Returns `dup` (True for the second and later copies in a run of at least three identical
    lines: they are never kept) and `run` (an id shared by the lines of each run of at least three
    similar lines, -1 elsewhere).
    """
    n = len(lines)
    dup = [False] * n
    run = [-1] * n
    if n < _MIN_RUN:
        return dup, run
    masked = mask("\n".join(lines)).split("\n")
    for start, end in _spans(list(map(similar, masked, masked[1:]))):
        run[start:end] = [start] * (end - start)
    for start, end in _spans(list(map(str.__eq__, lines, lines[1:]))):
        dup[start + 1 : end] = [True] * (end - start - 1)
    return dup, run
