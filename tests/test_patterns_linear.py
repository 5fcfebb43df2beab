"""Every regular expression in the proxy runs in time linear in its input.

Tool output is text nobody controls, and Python's `re` backtracks: one pattern with nested or
adjacent unbounded quantifiers over the same characters can stall the proxy for minutes on a
50-character line. This test finds every compiled pattern in `proxy/` (module globals, the
compiled idiom table, rules in tuples and dataclasses), feeds each the strings most likely to make
it work hard, built from its own parse tree (runs of its characters and pairs of them, repeats of
every prefix of every alternative, bare, as lines and spaced), and checks that its time grows no
faster than a plain scan's between 8K and 64K characters (quadratic grows 8x faster), and that
none explodes on the way (each string is grown by doubling from 64 characters). Each idiom found
at a line's start is also tried alone, in the form the line-start scans run it (a union's cost
per line is the sum of its alternatives'). The figures for every pattern are printed by
`python -m bench.adversarial.regex_report`.
"""

from __future__ import annotations

import re

import pytest

from bench.adversarial.patterns import compiled_patterns
from bench.adversarial.regex import check_linear, seeds
from proxy.pipeline.compact.markers import MARKER_RE
from proxy.pipeline.idioms import TABLE
from proxy.pipeline.idioms.compile import LINE_START, relax_ends

PATTERNS = compiled_patterns()
# The line-start idioms as the scans run each of them.
for _idiom in TABLE:
    if _idiom.at == "start":
        PATTERNS[f"idiom {_idiom.name}"] = re.compile(
            LINE_START + "(?:" + relax_ends(_idiom.pattern) + ")", re.MULTILINE
        )


def test_the_table_and_the_modules_are_all_found() -> None:
    names = set(PATTERNS)
    assert any(".COMPILED.anchored" in n for n in names)
    assert any(".COMPILED.fact_scan" in n for n in names)
    assert any(".COMPILED.rules[" in n for n in names)
    assert MARKER_RE in PATTERNS.values()  # (found under the first name it is reached by)
    assert len(names) > 60


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_is_linear_on_adversarial_strings(name: str) -> None:
    pattern = PATTERNS[name]
    verdict = check_linear(pattern, seeds(pattern, 60))
    assert verdict.linear(), f"{name} on {verdict.label} {verdict.unit[:60]!r}: " + (
        "explodes" if verdict.exploded else f"grows {verdict.growth:.1f}x a linear scan's"
    )
