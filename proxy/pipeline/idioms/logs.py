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

IDIOMS = (
    Idiom(
        "logs.exit_status",
        r"\[?(?i:exit|return) (?i:code|status)\b",
        SUMMARY,
        examples=("[exit code: 1]", "Exit status 2"),
    ),
    Idiom("logs.totals", r"(?i:total|summary)\b", SUMMARY, examples=("Total: 42", "SUMMARY")),
    Idiom(
        "logs.level_first",
        r"(?:FAILED|FAIL|ERROR|FATAL|CRITICAL|PANIC)\b",
        STRONG,
        examples=("FAILED tests/test_a.py::test_b - AssertionError", "ERROR: boom"),
    ),
    Idiom(
        "logs.error_colon",
        r"(?i:(?:fatal )?error(?:\[[\w-]+\])?:)",
        STRONG,
        examples=("error: could not compile `app`", "error[E0308]: mismatched types"),
    ),
    Idiom("logs.cross", r"× ", STRONG, examples=("× Failed to build `python-ldap`",)),
    Idiom(
        "logs.error_start.fact",
        r"ERROR\b|Error\b",
        fact="errors",
        examples=("ERROR: Could not find a version", "Error: Cannot find module 'x'"),
    ),
    Idiom(
        "logs.exited",
        # ... or a bare number: strace's `+++ exited with 1 +++`, a supervisor's `exited with 137`.
        r"\bexit(?:ed)? (?:with )?(?:non-?zero )?(?:code|status)\b|\bexited with \d",
        SUMMARY,
        at="anywhere",
        triggers=("exit",),
        examples=("Process exited with code 1", "+++ exited with 1 +++"),
    ),
    Idiom(
        "logs.crash",
        r"panicked at|segmentation fault|core dumped|command not found|\bunhandled\b"
        r"|\buncaught\b|" + "|".join(map(re.escape, ERRNO_MESSAGES)),
        STRONG,
        at="anywhere",
        triggers=(
            "panicked at",
            "segmentation fault",
            "core dumped",
            "command not found",
            "unhandled",
            "uncaught",
            *ERRNO_MESSAGES,
        ),
        examples=("Segmentation fault (core dumped)", "bind: address already in use"),
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
        triggers=(
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
        examples=("WARNING: cache is stale", "could not connect"),
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
        at="anywhere",
        cased=True,
        triggers=(
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
        examples=("2026-01-01 12:00:00 ERROR app: boom", '{"level":"error","msg":"boom"}'),
    ),
    Idiom(
        "logs.error_word.fact",
        r"\bFAILED\b|\b(?:fatal )?(?:error|Error|ERROR)(?:\[\w+\])?:(?!:)",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("src/a.c:3:5: error: expected ';'", "tests/a.py::t FAILED"),
        why="`error::X` is a Rust path, not an error",
    ),
    Idiom(
        "logs.failure_phrases.fact",
        r"\b(?:No such file or directory|Permission denied|command not found|Segmentation fault"
        r"|undefined reference to)\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("ld: main.o: undefined reference to `rb_push'",),
    ),
    Idiom(
        "logs.bracket_level.fact",
        r"\[(?:ERROR|FATAL|CRITICAL)\] *\S",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("[ERROR] Failed to execute goal",),
    ),
    Idiom(
        "logs.assertion.fact",
        # The first `Assertion `` only (atomic): a later one leaves less of the line to close it.
        r"\bassertion failed|^(?>.*?\bAssertion `).*' failed",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("main: main.c:5: main: Assertion `x > 0' failed.",),
        why="test macros; glibc's assert()",
    ),
    Idiom(
        "logs.network.fact",
        r"\b(?:Connection refused|Connection timed out|Could not resolve host"
        r"|Name or service not known|Temporary failure in name resolution|Network is unreachable"
        r"|No route to host)\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("curl: (6) Could not resolve host: example.invalid",),
    ),
    Idiom(
        "logs.level.fact",
        r"(?:^|[\s\[|(])(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)[\s:\]|)]+\S"
        r"|\"(?:level|severity|lvl)\"\s*:\s*\"(?i:error|fatal|critical|panic)\"",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("2026-01-01 12:00:00 ERROR app: boom",),
    ),
    Idiom(
        "logs.errno.fact",
        # A failed system call's message (strerror), in any case: Go and Node print it lowercase.
        r"\b(?i:" + "|".join(map(re.escape, ERRNO_MESSAGES)) + r")\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("listen tcp :8080: bind: address already in use",),
    ),
)
