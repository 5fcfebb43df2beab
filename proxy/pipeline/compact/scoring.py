"""Scoring: how much each line of program output matters to a coding agent that reads it later.

A model that ran a command needs the verdict (summary and exit status), the errors with a little
context, and tracebacks up to their exception line; progress chatter and long runs of passing tests
matter least. Scores are plain integers so selection can sort by them. The scores and patterns
are the idioms' (`proxy.pipeline.idioms`): they cover common toolchains by the shapes their
messages share; this module applies them, then
spreads context, reads tracebacks and demotes repeats. Speed matters (a
60k-token log must score in a few ms): line-anchored rules share one combined regex scan, and the
rules that may match anywhere in a line only test the lines that hold one of their trigger literals,
all of which are found in one Aho-Corasick scan.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import ahocorasick

from proxy.pipeline.compact.reports import Frames, frames
from proxy.pipeline.idioms import COMPILED, Compiled
from proxy.pipeline.idioms.compile import TRACEBACK_HEADER
from proxy.pipeline.idioms.record import CONTEXT, MEDIUM, MINOR, NORMAL, SECTION, STRONG

# Valgrind's and the sanitizers' prefix of every line of theirs.
_PID_MARK = re.compile(r"==\d+==")


def glued_reports(text: str) -> list[int]:
    """Where a `==PID==` report line starts in the middle of a line.

    Valgrind and the sanitizers write to stderr, unbuffered, while a program's stdout is flushed
    in blocks when piped: in combined output (`2>&1`, as agents run commands) a report's first
    line can land glued to half a line of the program's own (`step 22==6498== Invalid read of
    size 4`), and read from its start, the line says nothing."""
    return [
        at
        for at in (m.start() for m in _PID_MARK.finditer(text))
        if at and text[at - 1] not in "\n="
    ]


# Source quoted under a diagnostic behind a numbered gutter (gcc, clang, rustc, ruff, babel and
# Jest code frames: `  14 |     if (err) return ERROR_INVALID;`): the program's code, not its
# message. Its words ("error", "exit", "invalid") say nothing about the run; the diagnostic
# above it lends it context when that is kept.
# Only in a text that also holds the gutter's bare lines (`   |`, `   |     ^~~~`): a table's
# numbered rows (psql: ` 17 | failed | connection refused`) look the same otherwise.
_QUOTED = re.compile(r"^[ \t]*+(?:>[ \t]*)?\d+[ \t]+\|")
_QUOTED_LINE = re.compile(r"\n[ \t]*+(?:>[ \t]*)?\d+[ \t]+\|")
# From a newline (put in front of the text), so the engine skips from newline to newline.
_BARE_GUTTER = re.compile(r"\n[ \t]+\|[ \t]*(?:[\^~-][^\n]*)?(?![^\n])")


def frames_source(text: str) -> bool:
    """Whether the text quotes source behind a numbered gutter, as compilers and linters do
    under a diagnostic: it holds the gutter's bare lines."""
    return "|" in text and _BARE_GUTTER.search("\n" + text) is not None


_TRACEBACK = TRACEBACK_HEADER
_WORD = re.compile(r"\w+")
_MIN_REPEATS = 3  # first + last + at least one between
# Every trigger literal in one Aho-Corasick automaton: the text is scanned once for all of them
# (bench/pipeline_cost: ~4x faster than one `str.find` pass per literal, which was two thirds of
# scoring a long log).
_AUTOMATON = COMPILED.automaton


class _Finder:
    """Which lines hold each trigger literal, from one scan of the lowercased text."""

    def __init__(
        self, low: str, low_lines: list[str], automaton: ahocorasick.Automaton = _AUTOMATON
    ) -> None:
        self.starts = starts = list(accumulate((len(line) + 1 for line in low_lines), initial=0))
        found: dict[str, list[int]] = {}
        # No literal holds a newline, so a match lies within one line: the line of its last
        # character. Lines come in order; a literal seen twice on a line is listed once.
        line, next_start = 0, starts[1]  # `low_lines` holds at least one line
        for end, literal in automaton.iter(low):
            if end >= next_start:
                line = bisect_right(starts, end) - 1
                next_start = starts[line + 1]
            hits = found.get(literal)
            if hits is None:
                found[literal] = [line]
            elif hits[-1] != line:
                hits.append(line)
        self._found = found

    def lines_with(self, literal: str) -> list[int]:
        """Indices of the lines whose lowercased text contains `literal`, in order, each once.
        `literal` must be one of the rules' triggers (or the traceback header)."""
        return self._found.get(literal, [])


def _tracebacks(lines: Sequence[str], scores: list[int], heads: Sequence[int]) -> None:
    """A traceback is its header, deeper-indented frames, and the exception line closing it.

    The exception line is the answer; the last frame or two say where; the rest is context.
    The line before the header, when it says something, is what the program was doing when it
    raised (a logger's `ERROR: import failed:`, Sphinx's `WARNING: autodoc: failed to import`).
    """
    for head in heads:
        header = lines[head]
        indent = len(header) - len(header.lstrip())
        end = None
        for j in range(head + 1, min(len(lines), head + 400)):
            line = lines[j]
            stripped = line.lstrip()
            if stripped and len(line) - len(stripped) <= indent:
                end = j
                break
        if end is None:
            continue
        scores[head] = max(scores[head], MEDIUM)
        scores[end] = max(scores[end], STRONG)
        if head and lines[head - 1].strip():
            scores[head - 1] = max(scores[head - 1], CONTEXT)
        for j in range(head + 1, end):
            scores[j] = max(scores[j], CONTEXT if end - j <= 4 else MINOR)


def shape(line: str) -> str:
    """What kind of line this is, without what varies between lines of that kind.

    The first word stays (FAILED, ERROR, npm, the name of an exception, after pytest's `E`),
    every later word or number becomes `w`, punctuation and spacing stay: `FAILED
    tests/test_a.py::test_b - ` and `FAILED tests/test_c.py::test_d - ` share a shape; an
    assertion message, an exception or a gcc diagnostic with a different layout does not.
    """
    # pytest's `E` in front of an exception is no word of it: the exception's name is the first.
    first = _WORD.search(line, 1 if line.startswith("E ") else 0)
    if first is None:
        return line
    end = first.end()
    return line[:end] + _WORD.sub("w", line[end:])


def _repeats(lines: Sequence[str], scores: list[int]) -> frozenset[int]:
    """Signal lines of one shape seen many times: keep the first and the last at their rank.

    A run of 34 `FAILED tests/...::test_x - ` lines says one thing 34 times; ranked all alike,
    they would fill the room from the tail and push out the first failure, other errors and the
    summary's neighbours. The others of the shape drop one rank (verdicts and errors to MEDIUM,
    MEDIUM lines to MINOR): still kept before ordinary lines when there is room, but after the
    distinct signals. Done before context spreads, so the repeats lend none to their neighbours.
    Returns the last line of each such shape.
    """
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    members: dict[str, int] = {}
    signals = [i for i, s in enumerate(scores) if s >= MEDIUM]
    keys = [shape(lines[i]) for i in signals]
    for i, key in zip(signals, keys, strict=True):
        first.setdefault(key, i)
        last[key] = i
        members[key] = members.get(key, 0) + 1
    for i, key in zip(signals, keys, strict=True):
        if members[key] >= _MIN_REPEATS and i != first[key] and i != last[key]:
            scores[i] = MEDIUM if scores[i] > MEDIUM else MINOR
    return frozenset(i for key, i in last.items() if members[key] >= _MIN_REPEATS)


def score_lines(lines: Sequence[str], table: Compiled = COMPILED) -> list[int]:
    """One score per line (see the kinds in `idioms.record`); context spreads from errors and
    verdicts."""
    return scores_and_repeats(lines, table)[0]


def scores_and_repeats(
    lines: Sequence[str], table: Compiled = COMPILED
) -> tuple[list[int], frozenset[int]]:
    """`score_lines`, and the last line of each signal shape seen many times (`_repeats` keeps
    it at its rank, like the first, which already said the same). `table`: the compiled idioms
    (tests compile tables with a record removed)."""
    anchored, group_scores = table.anchored, table.group_scores
    text = "\n".join(lines)
    low = text.lower()
    low_lines = low.split("\n")
    finder = _Finder(low, low_lines, table.automaton)
    # The line-start rules read the text itself: where a lowercased line changed length ("İ"
    # lowercases to two characters), its lines start elsewhere than in `low`.
    starts = (
        finder.starts
        if len(low) == len(text)
        else list(accumulate((len(line) + 1 for line in lines), initial=0))
    )
    n = len(lines)
    scores = [NORMAL] * n
    # One newline in front: every line, the first included, then starts right after a newline.
    for match in anchored.finditer("\n" + text):
        i = bisect_right(starts, match.start()) - 1
        score = group_scores[match.lastgroup or "minor"]
        if scores[i] < score:
            scores[i] = score
    for at in glued_reports(text) if "==" in text else ():
        end = text.find("\n", at)
        glued = anchored.match("\n" + text[at : end if end >= 0 else len(text)])
        if glued is not None:
            i = bisect_right(starts, at) - 1
            scores[i] = max(scores[i], group_scores[glued.lastgroup or "minor"])
    framed = frames_source(text)
    quoted: dict[int, bool] = {}
    for rule in table.rules:
        candidates = {i for t in rule.triggers for i in finder.lines_with(t)}
        search, score, requires = rule.pattern.search, rule.score, rule.requires
        for i in candidates:
            if scores[i] >= score:
                continue
            line = low_lines[i]
            if all(r in line for r in requires) and search(lines[i] if rule.cased else line):
                q = quoted.get(i) if framed else False
                if q is None:
                    q = quoted[i] = _QUOTED.match(line) is not None
                if not q:
                    scores[i] = score
    for i, s in enumerate(scores):
        if s > MEDIUM and lines[i].startswith("E "):
            scores[i] = MEDIUM  # pytest's assertion detail: useful, but below the verdict lines
    report = frames(text, lines)
    if report:
        _report(scores, report)
    repeated = _repeats(lines, scores)
    _tracebacks(lines, scores, finder.lines_with(_TRACEBACK))
    # Context: one line before an error or verdict, two after (gcc prints the source line and a
    # caret under it; pytest prints the assertion; a verdict's neighbours are usually verdicts).
    anchors = [i for i, s in enumerate(scores) if s >= STRONG]
    for i in anchors:
        for j in (i - 1, i + 1, i + 2):
            if 0 <= j < n and scores[j] < CONTEXT and lines[j].strip():
                scores[j] = CONTEXT
    _file_headers(lines, scores, anchors)
    for i in report.quoted:
        scores[i] = min(scores[i], NORMAL)  # no context lent to the program's own text
    return scores, repeated


def _report(scores: list[int], report: Frames) -> None:
    """A failure report's own lines rank, the program's text it quotes does not. Each frame's
    exception (its first `E` line) is an error; the `>` line that raised it and its location
    are its context (what raised, and where); the other `E` lines (an assertion's diff) say
    what the exception means; the other frames' locations say where the call went, as a
    section rule says where lines come from, and their `>` lines, the calls, rank below them.
    Quoted source, arguments and locals are ordinary lines, whatever words they hold."""
    for i in report.quoted:
        scores[i] = NORMAL
    for i in report.calls:
        scores[i] = MINOR
    for i in report.locations:
        scores[i] = MEDIUM
    for i in report.details:
        scores[i] = SECTION
    for i in report.raises:
        scores[i] = CONTEXT
    for i in report.exceptions:
        scores[i] = STRONG


# A diagnostic that gives only `line:col` (ESLint's and stylelint's default format): its file is
# the unindented line heading its group.
_BARE_LOCATION = re.compile(r"^[ \t]+\d+:\d+[ \t]")


def _file_headers(lines: Sequence[str], scores: list[int], anchors: Sequence[int]) -> None:
    """The header of each group holding an error located by `line:col` alone is its context:
    kept without it, the error reads as the previous group's file's."""
    errors = {i for i in anchors if _BARE_LOCATION.match(lines[i])}
    header = -1
    for i, line in enumerate(lines) if errors else ():
        if line[:1] not in ("", " ", "\t"):
            header = i
        elif i in errors and header >= 0 and scores[header] < CONTEXT:
            scores[header] = CONTEXT


def signal_lines(text: str) -> int:
    """How many lines start like a log's signals (verdicts, errors, assertion details,
    traceback frames, section rules, source quoted behind a numbered gutter): the line-anchored
    rules alone, one scan each. A linter's report is mostly quoted source: not a document."""
    quoted = len(_QUOTED_LINE.findall("\n" + text)) if frames_source(text) else 0
    return len(COMPILED.anchored.findall("\n" + text)) + quoted


def signal_count(scores: Sequence[int]) -> int:
    """How many lines carry any signal beyond ordinary output: tells logs from plain text."""
    return sum(1 for s in scores if s >= MEDIUM)
