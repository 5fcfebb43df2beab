"""Rules: the shapes and words that say how much a line of program output matters.

The scores, the rules anchored at a line's start (one combined regex) and the rules that may
match anywhere in a line (tested only on the lines holding one of their trigger literals).
`proxy.pipeline.compact.scoring` applies them; they cover common toolchains by the shapes their
messages share, never by the content of any particular run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
ANCHORED = re.compile(
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
    # A failed test's mark in Jest's, Vitest's and other runners' listings (`✕ adds (4 ms)`).
    r"|[✕✗✘] \S"
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
    r"|\d+:[ \t]+[A-Z]{1,4}\d{3,4}\b"
    # g++'s template backtrace ends at the user's own line that set it off.
    r"|\d+:[ \t]+required from here$)"
    # An assertion's two sides (Jest, Vitest, Chai, JUnit and others print them on own lines).
    r"|(?:Expected|Received|Actual)(?: value)?:|(?:left|right): "
    # Jest's header of each failure's report (`● suite › test`), mocha's (`1) suite`).
    r"|● \S|\d+\) \S"
    # A linter's diagnostic led by its rule code (ruff's full format: `F401 [*] `os` imported
    # but unused`; pydocstyle, Hadolint, ShellCheck). Lint runs rarely say "error".
    r"|[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(])"
    r"|(?P<minor>_{3,} [^\n]* _{3,}$)"
    r")",
    re.MULTILINE,  # for the `$` ends of some alternatives
)
GROUP_SCORES = {
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


@dataclass(frozen=True)
class Rule:
    """A rule found anywhere in a line: only lines holding one of its (lowercase) trigger
    literals are tested: one scan for every literal is far cheaper than an unanchored regex.
    `requires` are literals every match contains: a line without them skips the regex.
    `cased`: the pattern reads the line as it is (a log level is ERROR, not "error")."""

    triggers: tuple[str, ...]
    pattern: re.Pattern[str]  # searched in the lowercased line, unless cased
    score: int
    requires: tuple[str, ...] = ()
    cased: bool = False


RULES = (
    Rule(
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
    Rule(
        ("collected ", "vulnerabilit", " changed", "newly installed", " generated"),
        re.compile(
            r"\bcollected \d+ items?\b|\b\d+ (?:vulnerabilit|files? changed|"
            r"upgraded, \d+ newly installed|errors? generated|warnings? generated)"
        ),
        SUMMARY,
    ),
    Rule(
        (" lost:", "in use at exit:", "heap usage:", "summary"),
        re.compile(
            r"\b(?:definitely|indirectly|possibly) lost:|in use at exit:|heap usage:"
            r"|\bsummary:|\b(?:error|leak|heap) summary\b"
        ),
        SUMMARY,
    ),
    # A location, then the word error: gcc/clang `f.c:3:5: error`, tsc and MSBuild
    # `f.ts(3,5): error TS2322`, ESLint's `  3:5  error  message  rule`.
    Rule(
        ("error",),
        re.compile(
            r"(?::\d+(?::\d+)?:|\(\d+(?:,\d+)?\):|^[ \t]*\d+:\d+)[ \t]*(?:fatal error|error)\b"
        ),
        STRONG,
    ),
    Rule(
        ("exit",),
        # ... or a bare number: strace's `+++ exited with 1 +++`, a supervisor's `exited with 137`.
        re.compile(r"\bexit(?:ed)? (?:with )?(?:non-?zero )?(?:code|status)\b|\bexited with \d"),
        SUMMARY,
    ),
    # Go's test failure idiom (`Total() = 1550, want 1395`, `got 3, want 4`): a t.Errorf line
    # says no error word.
    Rule((", want ",), re.compile(r", want \S"), MEDIUM),
    Rule(
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
    Rule(
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
        # Not a part of a dotted or hyphenated name (`email.errors`, `errors.py`,
        # `es-errors@1.3.0`, `assertion-error`): a module's, package's or file's name in a
        # listing, an install log or a profile says nothing went wrong.
        re.compile(
            r"(?<!\w[.-])\b(?:errors?|warnings?|warn|fail(?:ed|ures?|s)?|exceptions?|fatal|denied|"
            r"refused|time(?:d)? ?out|abort(?:ed)?|invalid|missing|unable|cannot|can't|could not|"
            r"couldn't|not found|deprecat\w*|conflict\w*|unresolved|traceback|unmet(?! optional)|"
            r"incompatible|mismatch|killed)\b(?![.-]\w|@)"
        ),
        MEDIUM,
    ),
    # An application log's error: the level as its own word after a timestamp, a thread or a
    # logger name (Python's logging, logback/log4j, Go's and Rust's loggers, syslog), or in a
    # JSON line. Its WARN and INFO neighbours are only words.
    Rule(
        (
            "error",
            "fatal",
            "critical",
            "severe",
            "panic",
            '"level":50',
            '"level":60',
            '"level": 50',
            '"level": 60',
        ),
        re.compile(
            r"(?:^|[\s\[|(])(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)[\s:\]|)]+\S"
            r"|\"(?:level|severity|lvl)\"\s*:\s*\"(?i:error|fatal|critical|panic)\""
            # pino's and bunyan's numeric levels: 50 is error, 60 fatal.
            r"|\"level\"\s*:\s*[56]0\b"
        ),
        STRONG,
        cased=True,
    ),
    # GitHub Actions' error annotations (`gh run view --log-failed`): `##[error]` and the
    # `::error file=...::` workflow command, behind the job, step and timestamp columns.
    Rule(("##[error]", "::error"), re.compile(r"##\[error\]|::error\b"), STRONG),
    # A row of a status table whose state is a failure: `kubectl get pods` (CrashLoopBackOff,
    # ImagePullBackOff, ErrImagePull, OOMKilled, Evicted), `kubectl get nodes` (NotReady),
    # `docker ps` (Exited with a non-zero code, unhealthy). One such row among hundreds of
    # Running ones is what the listing was run for.
    Rule(
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
    Rule(("shrink-proxy", " more times"), MARKER_RE, MARKER),
)
