"""Test runners of other languages: RSpec, minitest, ExUnit, PHPUnit."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "runners.totals",
        # RSpec's, ExUnit's and minitest's totals.
        r"\d+ (?:examples?|tests?|runs?), \d+ (?:failures?|assertions?)\b",
        SUMMARY,
        examples=("42 examples, 1 failure",),
    ),
    Idiom(
        "runners.totals.fact",
        r"\d+ (?:examples?|tests?|runs?), \d+ (?:failures?|assertions?)\b",
        fact="outcomes",
        examples=("42 examples, 1 failure",),
    ),
    Idiom("runners.phpunit.failures", r"FAILURES!", STRONG, examples=("FAILURES!",)),
    Idiom(
        "runners.phpunit.failures.fact",
        r"(?:FAILURES|ERRORS)!$",
        fact="errors",
        examples=("FAILURES!",),
    ),
    Idiom(
        "runners.phpunit.totals.fact",
        r"Tests: \d+, Assertions: \d+",
        fact="outcomes",
        examples=("Tests: 12, Assertions: 30, Failures: 1.",),
    ),
)
