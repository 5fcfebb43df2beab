"""Test runners of other languages: RSpec, minitest, ExUnit, PHPUnit."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "runners.totals",
        # RSpec's, ExUnit's and minitest's totals.
        r"\d+ (?:examples?|tests?|runs?), \d+ (?:failures?|assertions?)\b",
        SUMMARY,
        "outcomes",
        examples=("42 examples, 1 failure", "12 runs, 30 assertions, 1 failures, 0 errors"),
    ),
    Idiom(
        "runners.phpunit.failures",
        r"(?:FAILURES|ERRORS)!$",
        STRONG,
        "errors",
        examples=("FAILURES!", "ERRORS!"),
    ),
    Idiom(
        "runners.phpunit.totals",
        r"Tests: \d+, Assertions: \d+",
        SUMMARY,
        "outcomes",
        examples=("Tests: 12, Assertions: 30, Failures: 1.",),
    ),
    Idiom(
        "runners.phpunit.failed_asserting",
        r"\bFailed asserting that\b",
        MEDIUM,
        "errors",
        at="anywhere",
        cased=True,
        examples=("Failed asserting that 3 is identical to 4.",),
    ),
)
