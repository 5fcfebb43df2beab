"""Logs of any program: levels, exit statuses, the system's error messages, failure words."""

from __future__ import annotations

import re

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

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
_EXIT_STATUS = (
    "agent frameworks put an exit-status footer under every result: listed, those would fill "
    "the facts' slots with 'exit code 0', and the error lines say why a run failed"
)

IDIOMS = (
    Idiom(
        "logs.exited",
        # ... or a bare number: strace's `+++ exited with 1 +++`, a supervisor's `exited with 137`.
        r"\b(?:exit(?:ed)?|return) (?:with )?(?:non-?zero )?(?:code|status)\b|\bexited with \d",
        SUMMARY,
        at="anywhere",
        examples=(
            "Process exited with code 1",
            "+++ exited with 1 +++",
            "[exit code: 1]",
            "Return code: 2",
        ),
        why=_EXIT_STATUS,
    ),
    Idiom(
        "logs.totals",
        r"(?i:total|summary)\b",
        SUMMARY,
        examples=("Total: 42", "SUMMARY"),
        why="a word heading tables of any kind, not a verdict",
    ),
    Idiom(
        "logs.level_first",
        r"(?:FAILED|ERROR|Error|FATAL|CRITICAL|PANIC)\b",
        STRONG,
        "errors",
        examples=(
            "FAILED tests/test_a.py::test_b - AssertionError",
            "ERROR: Could not find a version that satisfies the requirement foo",
            "Error: Cannot find module 'x'",
        ),
        counter=("Errors are reported below",),
        why="a line that starts by saying it failed",
    ),
    Idiom(
        "logs.fail_word",
        r"FAIL\b",
        STRONG,
        examples=("FAIL",),
        why="go test ends with a bare FAIL line: ranked, but its package line is the fact "
        "(go.test.package_failed)",
    ),
    Idiom(
        "logs.error_colon",
        r"(?:^\s*|[^\w\s] ?)(?:fatal )?error(?:\[[\w-]+\])?:(?!:)"
        r"|\b(?:fatal )?(?:Error|ERROR)(?:\[[\w-]+\])?:(?!:)",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=(
            'error: could not compile `app` (bin "app") due to 1 previous error',
            "error[E0308]: mismatched types",
            "ringbuf.c:42:5: fatal error: lber.h: No such file or directory",
            "python -m pytest: error: unrecognized arguments: --cov",
            "#12 4.211 src/main.ts:9:1 - error: Cannot find module './routes'",
            "  error: subprocess-exited-with-error",
            "npm verbose stack Error: unable to resolve dependency tree",
        ),
        counter=("use std::error::Error;", "ValueError: bad", "Runs without error: fine"),
        why="`error:` at the start, or after a location's, a tool's or a step's punctuation (a "
        "lowercase one after a word is prose); `Error:` anywhere; `error::X` is a Rust path",
    ),
    Idiom(
        "logs.failed_word",
        r"\bFAILED\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("tests/test_a.py::test_b FAILED                      [ 12%]",),
        why="stage 1 ranks FAILED as a word (logs.words) and at a line's start "
        "(logs.level_first): a verbose test run prints it on every failing test's line",
    ),
    Idiom(
        "logs.cross",
        r"× ",
        STRONG,
        "errors",
        examples=("× Failed to build `python-ldap`", "  × No solution found when resolving"),
        why="pip's and uv's error report (miette's): uv prints no other error line",
    ),
    Idiom(
        "logs.command_not_found",
        r"command not found",
        STRONG,
        "errors",
        at="anywhere",
        examples=("bash: line 1: pytset: command not found",),
    ),
    Idiom(
        "logs.errno",
        r"\b(?:" + "|".join(map(re.escape, ERRNO_MESSAGES)) + r")\b",
        STRONG,
        "errors",
        at="anywhere",
        examples=(
            "listen tcp :8080: bind: address already in use",
            "cat: /etc/shadow: Permission denied",
        ),
        why="a failed system call's message (strerror), in any case: Go and Node print it "
        "lowercase",
    ),
    Idiom(
        "logs.network",
        r"\b(?:could not resolve host|name or service not known"
        r"|temporary failure in name resolution)\b",
        STRONG,
        "errors",
        at="anywhere",
        examples=("curl: (6) Could not resolve host: example.invalid",),
        why="the resolver's failures (curl, ssh, git, pip)",
    ),
    Idiom(
        "logs.unhandled",
        r"\bunhandled\b|\buncaught\b",
        STRONG,
        at="anywhere",
        examples=("Error: unhandled exception in worker 3", "Uncaught TypeError: x is undefined"),
        counter=("unhandledRejection",),
        why="ranked; prose says 'unhandled case' too, so the error it names is the fact",
    ),
    Idiom(
        "logs.assertion",
        # The first `Assertion `` only (atomic): a later one leaves less of the line to close it.
        r"\bassertion failed|^(?>.*?\bassertion `).*' failed",
        STRONG,
        "errors",
        at="anywhere",
        examples=(
            "main: main.c:5: main: Assertion `x > 0' failed.",
            "thread 'main' panicked: assertion failed: x > 0",
        ),
        why="test macros; glibc's assert()",
    ),
    Idiom(
        "logs.failed_to",
        r"\bFailed to \w",
        MEDIUM,
        "errors",
        at="anywhere",
        cased=True,
        examples=("Failed to start nginx.service: Unit not found.",),
        why="many tools' error line: 'Failed to ...'",
    ),
    Idiom(
        "logs.words",
        # Not a part of a dotted or hyphenated name (`email.errors`, `errors.py`,
        # `es-errors@1.3.0`, `assertion-error`): a module's, package's or file's name in a
        # listing, an install log or a profile says nothing went wrong.
        r"(?<!\w[.-])\b(?:errors?|warnings?|warn|fail(?:ed|ures?|s)?|exceptions?|fatal|denied|"
        r"refused|time(?:d)? ?out|abort(?:ed)?|invalid|missing|unable|cannot|can't|could not|"
        r"couldn't|not found|deprecat\w*|conflict\w*|unresolved|traceback|unmet(?! optional)|"
        r"incompatible|mismatch|killed)\b(?![.-]\w|@)",
        MEDIUM,
        at="anywhere",
        examples=("WARNING: cache is stale", "could not connect to the cache"),
        counter=("from email.errors import HeaderParseError", "es-errors@1.3.0"),
        why="a word saying something may have gone wrong: the facts list lines that say what",
    ),
    Idiom(
        "logs.level",
        # An application log's error: the level as its own word after a timestamp, a thread or a
        # logger name (Python's logging, logback/log4j, Go's and Rust's loggers, syslog), or in a
        # JSON line. Its WARN and INFO neighbours are only words.
        r"(?:^|[\s\[|(])(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)[\s:\]|)]+\S"
        r"|\"(?:level|severity|lvl)\"\s*:\s*\"(?i:error|fatal|critical|panic)\""
        # pino's and bunyan's numeric levels: 50 is error, 60 fatal.
        r"|\"level\"\s*:\s*[56]0\b",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=(
            "2026-01-01 12:00:00 ERROR app: boom",
            '{"level":"error","msg":"boom"}',
            '{"level":50,"time":1,"msg":"boom"}',
        ),
        counter=("2026-01-01 12:00:00 INFO app: no errors",),
    ),
)
