"""Scanning a long text only where a literal trigger occurs.

A pattern whose every match holds a literal (a path holds "/", a URL "://") need not run over a
whole tool dump: one fast search for the literal finds the lines or words that can match, and the
pattern runs over those alone. `find_in` gives exactly `pattern.finditer(text)`'s matches when
that premise holds (tests/pipeline/test_facts_fast.py checks it against a plain scan). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

WORDISH = re.compile(r"[\w.@+~/=<>!-]*")
GAP = 64  # scans closer than this are joined into one: a scan call costs more than the gap
SHORT = 160  # a text this short is scanned whole once it holds a trigger


def lines_with(text: str, trigger: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the runs of whole lines of `text` that hold a match of `trigger`."""
    runs: list[tuple[int, int]] = []
    search, find, size = trigger.search, text.find, len(text)
    pos = 0
    while (m := search(text, pos)) is not None:
        start = text.rfind("\n", 0, m.start()) + 1
        end = find("\n", m.end())
        if end < 0:
            end = size
        if runs and start - runs[-1][1] <= GAP:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
        pos = end + 1
    return runs


def words_with(text: str, trigger: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the maximal runs of WORDISH characters of `text` that hold a match of
    `trigger` (close runs joined, with what lies between them)."""
    runs: list[tuple[int, int]] = []
    search, size = trigger.search, len(text)
    backwards = ""  # the text reversed: where a run starts is where it ends in there
    pos = 0
    while (m := search(text, pos)) is not None:
        at = m.start()
        end = wordish_end(text, at)
        if runs and at - runs[-1][1] <= GAP:
            runs[-1] = (runs[-1][0], end)
        else:
            backwards = backwards or text[::-1]
            runs.append((size - wordish_end(backwards, size - at), end))
        pos = end + 1
    return runs


def wordish_end(text: str, at: int) -> int:
    m = WORDISH.match(text, at)
    return m.end() if m else at  # always a match, maybe an empty one


def find_in(
    spans: Callable[[str, re.Pattern[str]], list[tuple[int, int]]],
    pattern: re.Pattern[str],
    text: str,
    trigger: re.Pattern[str],
) -> Iterator[re.Match[str]]:
    """`pattern.finditer(text)`, when every match of `pattern` holds a match of `trigger`:
    only the `spans` (lines_with or words_with) of `text` that hold one are scanned.

    The matches are the same: no match crosses a span's ends, and the characters just outside a
    span (newlines, or characters that are not WORDISH) pass the pattern's look-aheads as the
    end of the text does; its look-behinds see the text before the span."""
    if len(text) <= SHORT:
        if trigger.search(text):
            yield from pattern.finditer(text)
        return
    for start, end in spans(text, trigger):
        yield from pattern.finditer(text, start, end)
