"""Reports: the frames of a test runner's failure report, where it quotes the code it ran.

pytest's long tracebacks (`--tb=long`, the default `auto`, `--showlocals`) print, for every frame,
the function's arguments (`self = <HTTPConnection(...)>, timeout = 2.0`), its source indented by
four, a `>` on the failing line, `E` lines for the exception, its locals (`total = 31`), then a
location line closing the frame (`ledger/codec.py:23: UnicodeDecodeError`; `path:12: ` for the
frames above; `--tb=short` prints `path:12: in name` before its one quoted line). A library's
quoted source says "error", "timeout" and "total" on every other line, and its locals look like
module-level names: scored for their words, they outranked the `E` lines that say what failed,
and counted as definitions, they made a report pass for source code. What the report itself says
is its `E` lines, `>` lines and locations; the rest is the program's text. Found by the report's
layout, never by what the program says (`scoring` ranks the roles, `outline` reads a text with
frames as a log). Pure.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

# `path:line: ` closing a long frame (with the exception's type on the last one), or opening a
# short one (`path:line: in name`). A path is one word with a `/`, `\` or `.` in it (a drive
# letter allowed): a clock's `12:30:01: ` is none, and a sentence holds blanks.
# Found after a newline put in front, so the engine skips from line to line in C.
_LOCATION = re.compile(
    r"\n(?:[A-Za-z]:)?(?=[^\s:]*?[/\\.])[^\s:]++:\d++: "
    r"(?:(?P<short>in \S++)|[A-Za-z_][\w.]*+)?[ \t]*(?![^\n])"
)
# What every location holds, found by a literal scan: most texts hold none (1 in 10 of the dev
# corpus's tool results), and are passed over 10x faster than the locations are looked for.
_HINT = re.compile(r":\d++: ")
# An argument or local at column 0: `name = value` (names aligned with blanks under
# --showlocals), or several arguments on one line.
_LOCAL = re.compile(r"(?<!\w)[A-Za-z_]\w*+ *= ")


@dataclass(frozen=True)
class Frames:
    """The lines of a report's frames, by what pytest wrote them for."""

    exceptions: frozenset[int]  # the first `E` line of each block of them: the exception
    details: frozenset[int]  # the other `E` lines that say something (an assertion's diff)
    raises: frozenset[int]  # the `>` line of a frame that raises, and its location line
    calls: frozenset[int]  # the `>` lines of the frames above it
    locations: frozenset[int]  # every frame's location line
    quoted: frozenset[int]  # quoted source, arguments, locals, blank lines: the program's

    def __bool__(self) -> bool:
        return bool(self.locations)


NONE = Frames(*(frozenset[int]() for _ in range(6)))


def _kind(line: str) -> str:
    """What a line of a frame is: "E", ">", "q" (quoted, or a local) or "" (not of a frame)."""
    if not line or line[0] in " \t":
        return "q"
    head = line[0]
    if head in "E>" and (len(line) == 1 or line[1] in " \t"):
        return head
    if _LOCAL.match(line):
        return "q"
    return ""


def frames(text: str, lines: Sequence[str]) -> Frames:
    """The frames of every failure report in `text` (`lines`: its lines): each ends at its
    location line and runs back to the previous location or any other line a frame does not
    hold (a test's header, a separator, a chained exception's sentence), and holds an `E` or `>`
    line; a short frame runs on from its location. NONE when the text holds no location line,
    found in one scan before any line is read."""
    if _HINT.search(text) is None:
        return NONE
    # In "\n" + text a match starts at its newline: where its line starts in `text`.
    found = list(_LOCATION.finditer("\n" + text))
    if not found:
        return NONE
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
    roles: dict[str, set[int]] = {r: set() for r in Frames.__dataclass_fields__}
    at = {bisect_right(starts, m.start()) - 1: m.group("short") is not None for m in found}
    n = len(lines)

    def mark(first: int, end: int, location: int, short: bool) -> None:
        """The lines [first, end) as the frame closed (or, `short`, opened) by `location`."""
        kinds = [_kind(lines[j]) for j in range(first, end)]
        if not short and "E" not in kinds and ">" not in kinds:
            return  # no frame: a line that happens to read `path:12: `
        roles["locations"].add(location)
        arrows: list[int] = []
        raising: list[int] = []
        previous = ""
        for j, k in enumerate(kinds, first):
            if k == "q":
                roles["quoted"].add(j)
            elif k == ">":
                arrows.append(j)
            elif k != "E":
                pass  # (a frame's walk stops at any other line: none reaches here)
            elif previous != "E":
                roles["exceptions"].add(j)
                raising = raising or arrows[-1:] or [location]
            else:
                roles["details" if lines[j][1:].strip() else "quoted"].add(j)
            previous = k
        if raising:
            roles["raises"].update((location, *raising))
        roles["calls"].update(j for j in arrows if j not in raising)

    for loc, short in at.items():
        if short:  # `path:12: in name`, its quoted line, and on the last one `E` lines
            end = loc + 1
            while end < n and end not in at and _kind(lines[end]):
                end += 1
            if end > loc + 1 and lines[loc + 1][:1] in (" ", "\t"):
                mark(loc + 1, end, loc, True)
            continue
        first = loc
        while first > 0 and first - 1 not in at and _kind(lines[first - 1]):
            first -= 1
        mark(first, loc, loc, False)
    return Frames(**{r: frozenset(v) for r, v in roles.items()})
