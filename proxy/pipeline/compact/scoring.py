"""Scoring: how much each line of program output matters to a coding agent that reads it later.

A model that ran a command needs the verdict (summary and exit status), the errors with a little
context, and tracebacks up to their exception line; progress chatter and long runs of passing tests
matter least. Scores are plain integers so selection can sort by them. Patterns cover common
toolchains (pytest, pip, npm, gcc/clang, make, cargo, apt, git, valgrind, Python tracebacks) by
the shapes their messages share, never by the content of any particular run. Speed matters (a
60k-token log must score in a few ms): line-anchored rules share one combined regex scan, and the
rules that may match anywhere in a line only test the lines that hold one of their trigger literals,
all of which are found in one Aho-Corasick scan.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import ahocorasick

from proxy.pipeline.compact.markers import MARKER_RE

SUMMARY = 90  # verdicts: final test summary, exit code, "Successfully installed", totals
STRONG = 80  # errors: FAILED/ERROR lines, compiler errors, exception lines, npm ERR!
CONTEXT = 70  # lines right around an error or summary, the last frames of a traceback
MARKER = 60  # a marker left by an earlier compaction: cheap and tells what is missing
SECTION = 55  # big section rules (`=== FAILURES ===`) that tell where the lines came from
MEDIUM = 50  # warnings, words like "failed"/"cannot", pytest `E` and `>` lines, traceback frames
MINOR = 40  # smaller section headers (`____ test_x ____`), the rest of a traceback
NORMAL = 20
SIMILAR = 10  # the inside of a run of near-identical lines (progress, PASSED, downloads)

# Rules anchored at the start of a line (after indentation): one combined scan over the text with
# a newline put in front. The pattern starts with the literal `\n`, so the regex engine skips to
# the next newline in C instead of trying the whole pattern at every character (as `^` under
# MULTILINE would: ~10x slower). No alternative crosses a newline, so each line is tried once.
# The first alternative that matches wins, so groups go from high to low.
# Valgrind and the sanitizers put `==PID==` in front of every line of theirs: the rules read what
# follows it.
_ANCHORED = re.compile(
    r"\n[ \t]*+(?:==\d+==[ \t]*+)?(?:"
    r"(?P<summary>\[?(?i:exit|return) (?i:code|status)\b"
    r"|=+ [^\n]*\b(?:passed|failed|errors?|no tests ran)\b[^\n]* =+$"
    r"|Ran \d+ tests? in\b|(?:OK|FAILED)(?: \([^\n]*\))?[ \t]*$"
    r"|(?:Tests|Test Suites|Test Files|Snapshots):[ \t]+\d"
    r"|Successfully (?:installed|built|uninstalled|tagged|created|registered)\b"
    r"|(?:added|removed|changed|audited|up to date)\b[^\n]*\bpackages?\b"
    r"|(?i:total|summary)\b|Finished\b"
    # Maven prints its verdict behind a log level: `[INFO] BUILD FAILURE`.
    r"|(?:\[[A-Z]+\] )?(?:BUILD|Build) (?:SUCCESS(?:FUL)?|FAILURE|FAILED|succeeded|failed)\b"
    # Per-package verdicts (go test), error and problem totals (tsc, ESLint, MSBuild), mocha's
    # totals, infrastructure plans and a merge that stopped.
    r"|(?:ok|FAIL)[ \t]+\S+[ \t]+(?:[\d.]+s|\(cached\))[ \t]*$"
    r"|Found \d+ errors?\b|[✖✕×] \d+ problems?\b|\d+ (?:Error|Warning)\(s\)"
    r"|\d+ (?:passing|failing|pending)\b|Plan: \d+ to add\b|(?:Apply|Destroy) complete!"
    r"|Automatic merge failed\b"
    # CTest's pass rate; RSpec's, ExUnit's and minitest's totals.
    r"|\d+% tests passed\b|\d+ (?:examples?|tests?|runs?), \d+ (?:failures?|assertions?)\b"
    r"|-- Configuring (?:done|incomplete)\b)"
    r"|(?P<strong>(?:FAILED|FAIL|ERROR|FATAL|CRITICAL|PANIC)\b"
    r"|(?i:(?:fatal )?error(?:\[[\w-]+\])?:)"
    # A log level in brackets (Maven, Gradle and many loggers), go's failed test and panic,
    # git's fatal and conflicts, Kotlin's `e: file`, a Gradle task that failed.
    r"|\[(?:ERROR|FATAL|SEVERE)\]|--- FAIL:|panic:|fatal:|CONFLICT \("
    r"|e: (?:file:/|/)|> Task :\S+ FAILED\b|Execution failed for task\b"
    r"|npm (?:ERR!|error)\b|E: |CMake Error\b|ninja: build stopped\b"
    r"|error (?:Command failed|An unexpected error)\b|ERR_PNPM_\w|ELIFECYCLE\b|FAILURES!"
    # A dotted name ending in Error/Exception/...: the whole name, then a look back at its end
    # (a backtracking `[\w.]*` would retry six suffixes at every character of every first word).
    r"|[\w.]*+(?:(?<=Error)|(?<=Exception)|(?<=Exit)|(?<=Interrupt)|(?<=Failure)|(?<=Fault))(?::|$)"
    r"|make(?:\[\d+\])?: \*\*\*|× "
    # Memcheck's error kinds (Valgrind manual, "Explanation of error messages from Memcheck").
    r"|Invalid (?:read|write|free|realloc)\b|Mismatched (?:free|delete)|Conditional jump or move"
    r"|Use of uninitialised value|Syscall param \S+ points to|Source and destination overlap"
    r"|[\d,]+ bytes in [\d,]+ blocks are (?:definitely|possibly) lost|Process terminating with)"
    r"|(?P<section>={3,} [^\n]* ={3,}$)"
    r"|(?P<medium>[E>][ \t]+\S|File \"[^\"\n]+\", line \d+"
    # After `path:line:`, pytest's line closing each failure (where it was raised, and what), or
    # a linter's diagnostic behind `path:line:col:` (flake8, pylint, ruff --output-format
    # concise); one scan of the path for both, which nothing else may hold (possessive).
    r"|[^\s:]++:\d+:(?: [\w.]*(?:Error|Exception|Failure|Exit|Interrupt)$"
    r"|\d+:[ \t]+[A-Z]{1,4}\d{3,4}\b)"
    # An assertion's two sides (Jest, Vitest, Chai, JUnit and others print them on own lines).
    r"|(?:Expected|Received|Actual)(?: value)?:"
    # A linter's diagnostic led by its rule code (ruff's full format: `F401 [*] `os` imported
    # but unused`; pydocstyle, Hadolint, ShellCheck). Lint runs rarely say "error".
    r"|[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(])"
    r"|(?P<minor>_{3,} [^\n]* _{3,}$)"
    r")",
    re.MULTILINE,  # for the `$` ends of some alternatives
)
_GROUP_SCORES = {
    "summary": SUMMARY,
    "strong": STRONG,
    "section": SECTION,
    "medium": MEDIUM,
    "minor": MINOR,
}


# What the C library says when a system call fails (strerror), as C programs, Go (`listen tcp
# :8080: bind: address already in use`), Python and Node print it: the cause of many a failed
# start, however the program around it logs. Lowercase, as scoring reads lines.
ERRNO_MESSAGES = (
    "no such file or directory",
    "permission denied",
    "address already in use",
    "connection refused",
    "connection reset by peer",
    "no space left on device",
    "too many open files",
    "out of memory",
    "read-only file system",
    "operation not permitted",
    "disk quota exceeded",
    "cannot allocate memory",
    "network is unreachable",
    "no route to host",
    "connection timed out",
    "i/o timeout",  # Go's net package
    "deadline exceeded",  # Go's context
)


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


@dataclass(frozen=True)
class _Rule:
    """A rule found anywhere in a line: only lines holding one of its (lowercase) trigger
    literals are tested: one scan for every literal is far cheaper than an unanchored regex.
    `requires` are literals every match contains: a line without them skips the regex.
    `cased`: the pattern reads the line as it is (a log level is ERROR, not "error")."""

    triggers: tuple[str, ...]
    pattern: re.Pattern[str]  # searched in the lowercased line, unless cased
    score: int
    requires: tuple[str, ...] = ()
    cased: bool = False


_RULES = (
    _Rule(
        (
            " passed",
            " failed",
            " error",
            " skipped",
            " xfailed",
            " xpassed",
            " deselected",
            " warning",
        ),
        re.compile(
            r"\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b"
            r".*\bin \d+(?:\.\d+)?s\b"
        ),
        SUMMARY,
        ("in ",),  # every PASSED line of a verbose run holds " passed"; few hold "in "
    ),
    _Rule(
        ("collected ", "vulnerabilit", " changed", "newly installed", " generated"),
        re.compile(
            r"\bcollected \d+ items?\b|\b\d+ (?:vulnerabilit|files? changed|"
            r"upgraded, \d+ newly installed|errors? generated|warnings? generated)"
        ),
        SUMMARY,
    ),
    _Rule(
        (" lost:", "in use at exit:", "heap usage:", "summary"),
        re.compile(
            r"\b(?:definitely|indirectly|possibly) lost:|in use at exit:|heap usage:"
            r"|\bsummary:|\b(?:error|leak|heap) summary\b"
        ),
        SUMMARY,
    ),
    # A location, then the word error: gcc/clang `f.c:3:5: error`, tsc and MSBuild
    # `f.ts(3,5): error TS2322`, ESLint's `  3:5  error  message  rule`.
    _Rule(
        ("error",),
        re.compile(
            r"(?::\d+(?::\d+)?:|\(\d+(?:,\d+)?\):|^[ \t]*\d+:\d+)[ \t]*(?:fatal error|error)\b"
        ),
        STRONG,
    ),
    _Rule(
        ("exit",),
        re.compile(r"\bexit(?:ed)? (?:with )?(?:non-?zero )?(?:code|status)\b"),
        SUMMARY,
    ),
    _Rule(
        (
            "panicked at",
            "segmentation fault",
            "core dumped",
            "command not found",
            "unhandled",
            "uncaught",
            *ERRNO_MESSAGES,
        ),
        re.compile(
            r"panicked at|segmentation fault|core dumped|command not found|\bunhandled\b"
            r"|\buncaught\b|" + "|".join(map(re.escape, ERRNO_MESSAGES))
        ),
        STRONG,
    ),
    _Rule(
        (
            "error",
            "warn",
            "fail",
            "exception",
            "fatal",
            "denied",
            "refused",
            "timeout",
            "time out",
            "timed out",
            "abort",
            "invalid",
            "missing",
            "unable",
            "cannot",
            "can't",
            "could not",
            "couldn't",
            "not found",
            "deprecat",
            "conflict",
            "unresolved",
            "traceback",
            "unmet",
            "incompatible",
            "mismatch",
            "killed",
        ),
        re.compile(
            r"\b(?:errors?|warnings?|warn|fail(?:ed|ures?|s)?|exceptions?|fatal|denied|refused|"
            r"time(?:d)? ?out|abort(?:ed)?|invalid|missing|unable|cannot|can't|could not|couldn't|"
            r"not found|deprecat\w*|conflict\w*|unresolved|traceback|unmet|incompatible|"
            r"mismatch|killed)\b"
        ),
        MEDIUM,
    ),
    # An application log's error: the level as its own word after a timestamp, a thread or a
    # logger name (Python's logging, logback/log4j, Go's and Rust's loggers, syslog), or in a
    # JSON line. Its WARN and INFO neighbours are only words.
    _Rule(
        ("error", "fatal", "critical", "severe", "panic"),
        re.compile(
            r"(?:^|[\s\[|(])(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)[\s:\]|)]+\S"
            r"|\"(?:level|severity|lvl)\"\s*:\s*\"(?i:error|fatal|critical|panic)\""
        ),
        STRONG,
        cased=True,
    ),
    # GitHub Actions' error annotations (`gh run view --log-failed`): `##[error]` and the
    # `::error file=...::` workflow command, behind the job, step and timestamp columns.
    _Rule(("##[error]", "::error"), re.compile(r"##\[error\]|::error\b"), STRONG),
    # A row of a status table whose state is a failure: `kubectl get pods` (CrashLoopBackOff,
    # ImagePullBackOff, ErrImagePull, OOMKilled, Evicted), `kubectl get nodes` (NotReady),
    # `docker ps` (Exited with a non-zero code, unhealthy). One such row among hundreds of
    # Running ones is what the listing was run for.
    _Rule(
        (
            "backoff",  # CrashLoopBackOff, ImagePullBackOff
            "errimagepull",
            "oomkilled",
            "evicted",
            "notready",
            "unhealthy",
            "exited (",
        ),
        re.compile(
            r"backoff\b|errimagepull|oomkilled|\bevicted\b|\bnotready\b|\bunhealthy\b"
            r"|\bexited \((?!0\))\d+\)"
        ),
        MEDIUM,
    ),
    _Rule(("shrink-proxy", " more times"), MARKER_RE, MARKER),
)
# Source quoted under a diagnostic behind a numbered gutter (gcc, clang, rustc, ruff, babel and
# Jest code frames: `  14 |     if (err) return ERROR_INVALID;`): the program's code, not its
# message. Its words ("error", "exit", "invalid") say nothing about the run; the diagnostic
# above it lends it context when that is kept.
# Only in a text that also holds the gutter's bare lines (`   |`, `   |     ^~~~`): a table's
# numbered rows (psql: ` 17 | failed | connection refused`) look the same otherwise.
_QUOTED = re.compile(r"[ \t]*+(?:>[ \t]*)?\d+[ \t]+\|")
_QUOTED_LINE = re.compile(r"\n[ \t]*+(?:>[ \t]*)?\d+[ \t]+\|")
# From a newline (put in front of the text), so the engine skips from newline to newline.
_BARE_GUTTER = re.compile(r"\n[ \t]+\|[ \t]*(?:[\^~-][^\n]*)?(?![^\n])")


def frames_source(text: str) -> bool:
    """Whether the text quotes source behind a numbered gutter, as compilers and linters do
    under a diagnostic: it holds the gutter's bare lines."""
    return "|" in text and _BARE_GUTTER.search("\n" + text) is not None


_TRACEBACK = "traceback (most recent call last):"
_WORD = re.compile(r"\w+")
_MIN_REPEATS = 3  # first + last + at least one between


def _automaton() -> ahocorasick.Automaton:
    """Every trigger literal in one Aho-Corasick automaton: the text is scanned once for all of
    them (bench/pipeline_cost: ~4x faster than one `str.find` pass per literal, which was two
    thirds of scoring a long log)."""
    automaton = ahocorasick.Automaton()
    for literal in {t for rule in _RULES for t in rule.triggers} | {_TRACEBACK}:
        automaton.add_word(literal, literal)
    automaton.make_automaton()
    return automaton


_AUTOMATON = _automaton()


class _Finder:
    """Which lines hold each trigger literal, from one scan of the lowercased text."""

    def __init__(self, low: str, low_lines: list[str]) -> None:
        self.starts = starts = list(accumulate((len(line) + 1 for line in low_lines), initial=0))
        found: dict[str, list[int]] = {}
        # No literal holds a newline, so a match lies within one line: the line of its last
        # character. Lines come in order; a literal seen twice on a line is listed once.
        line, next_start = 0, starts[1]  # `low_lines` holds at least one line
        for end, literal in _AUTOMATON.iter(low):
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
        for j in range(head + 1, end):
            scores[j] = max(scores[j], CONTEXT if end - j <= 4 else MINOR)


def shape(line: str) -> str:
    """What kind of line this is, without what varies between lines of that kind.

    The first word stays (FAILED, ERROR, npm, the name of an exception), every later word or
    number becomes `w`, punctuation and spacing stay: `FAILED tests/test_a.py::test_b - ` and
    `FAILED tests/test_c.py::test_d - ` share a shape; an assertion message, an exception or a
    gcc diagnostic with a different layout does not.
    """
    first = _WORD.search(line)
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


def score_lines(lines: Sequence[str]) -> list[int]:
    """One score per line (see the constants above); context spreads from errors and verdicts."""
    return scores_and_repeats(lines)[0]


def scores_and_repeats(lines: Sequence[str]) -> tuple[list[int], frozenset[int]]:
    """`score_lines`, and the last line of each signal shape seen many times (`_repeats` keeps
    it at its rank, like the first, which already said the same)."""
    text = "\n".join(lines)
    low = text.lower()
    low_lines = low.split("\n")
    finder = _Finder(low, low_lines)
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
    for match in _ANCHORED.finditer("\n" + text):
        i = bisect_right(starts, match.start()) - 1
        score = _GROUP_SCORES[match.lastgroup or "minor"]
        if scores[i] < score:
            scores[i] = score
    for at in glued_reports(text) if "==" in text else ():
        end = text.find("\n", at)
        glued = _ANCHORED.match("\n" + text[at : end if end >= 0 else len(text)])
        if glued is not None:
            i = bisect_right(starts, at) - 1
            scores[i] = max(scores[i], _GROUP_SCORES[glued.lastgroup or "minor"])
    framed = frames_source(text)
    quoted: dict[int, bool] = {}
    for rule in _RULES:
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
    repeated = _repeats(lines, scores)
    _tracebacks(lines, scores, finder.lines_with(_TRACEBACK))
    # Context: one line before an error or verdict, two after (gcc prints the source line and a
    # caret under it; pytest prints the assertion; a verdict's neighbours are usually verdicts).
    anchors = [i for i, s in enumerate(scores) if s >= STRONG]
    for i in anchors:
        for j in (i - 1, i + 1, i + 2):
            if 0 <= j < n and scores[j] < CONTEXT and lines[j].strip():
                scores[j] = CONTEXT
    return scores, repeated


def signal_lines(text: str) -> int:
    """How many lines start like a log's signals (verdicts, errors, assertion details,
    traceback frames, section rules, source quoted behind a numbered gutter): the line-anchored
    rules alone, one scan each. A linter's report is mostly quoted source: not a document."""
    quoted = len(_QUOTED_LINE.findall("\n" + text)) if frames_source(text) else 0
    return len(_ANCHORED.findall("\n" + text)) + quoted


def signal_count(scores: Sequence[int]) -> int:
    """How many lines carry any signal beyond ordinary output: tells logs from plain text."""
    return sum(1 for s in scores if s >= MEDIUM)
