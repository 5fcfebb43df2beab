"""Invariants of compaction on generated outputs: fits, never grows, idempotent, deterministic."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.pipeline.compact import compact_text
from proxy.pipeline.compact.runs import mask, similar
from proxy.pipeline.compact.scoring import _AUTOMATON, _Finder
from tests.pipeline.counters import crude, tik

counters = st.sampled_from([tik, crude])
fragments = st.sampled_from(
    [
        "PASSED",
        "FAILED tests/test_x.py::test_y - AssertionError",
        "ERROR: boom",
        "error:",
        "Traceback (most recent call last):",
        '  File "a.py", line 3, in f',
        "ValueError: bad",
        "Downloading pkg-1.0.whl (45 kB)",
        "[exit code: 1]",
        "=== 3 failed, 9 passed in 1.2s ===",
        "npm ERR! code E404",
        "warning: unused",
        "\r",
        "   ",
        "",
        "├── dep@1.2.3",
        "E   assert 1 == 2",
        "[... 3 lines (40 tokens) omitted by shrink-proxy ...]",
        "{",
        "}",
        "[",
        "]",
        '"k": 1,',
        "\u2501" * 30,
        "x" * 300,
        "Successfully installed a-1 b-2",
    ]
)
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
line = st.one_of(fragments, words, st.builds(lambda a, b: f"{a} {b}", fragments, words))
texts = st.lists(line, min_size=1, max_size=400).map("\n".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda children: (
        st.lists(children, max_size=60)
        | st.dictionaries(st.text(max_size=12), children, max_size=30)
    ),
    max_leaves=400,
)


def check(text: str, budget: int, count: Callable[[str], int]) -> None:
    r = compact_text(text, budget, count)
    before = count(text)
    if before <= budget:
        assert r is None
        return
    assert r is not None
    assert r.kind in ("log", "json", "text")
    assert count(r.text) == r.tokens_after <= budget
    assert r.tokens_after <= before
    assert compact_text(r.text, budget, count) is None
    assert compact_text(text, budget, count) == r


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.integers(min_value=64, max_value=700), counters)
def test_logs_fit(text: str, budget: int, count: Callable[[str], int]) -> None:
    check(text, budget, count)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    json_values, st.integers(min_value=64, max_value=500), counters, st.booleans(), st.booleans()
)
def test_json_fits(
    value: object, budget: int, count: Callable[[str], int], indent: bool, trailer: bool
) -> None:
    text = json.dumps(value, indent=2 if indent else None) + ("\n[exit code: 0]" if trailer else "")
    check(text, budget, count)
    r = compact_text(text, budget, count)
    if r is not None and r.kind == "json":
        body = r.text.removesuffix("\n[exit code: 0]") if trailer else r.text
        json.loads(body)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=3000), st.integers(min_value=1, max_value=63), counters)
def test_tiny_budgets_never_grow(text: str, budget: int, count: Callable[[str], int]) -> None:
    r = compact_text(text, budget, count)
    if r is not None:
        assert r.tokens_after <= r.tokens_before


_NUMBER = re.compile(r"[0-9]+(?:[.,:][0-9]+)*")
masked_text = st.text(alphabet="0123456789.,:ab -\u00e9\u2501\t", max_size=60)


def similar_by_definition(a: str, b: str) -> bool:
    """Common prefix (4 or more) + common suffix (not overlapping) >= 70% of the longer line."""
    if a == b:
        return bool(a.strip())
    if not a.strip() or not b.strip():
        return False
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    if prefix < 4:
        return False
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    return prefix + suffix >= 0.7 * max(len(a), len(b))


@settings(max_examples=400, deadline=None)
@given(masked_text)
def test_mask_replaces_every_number_by_one_zero(text: str) -> None:
    assert mask(text) == _NUMBER.sub("0", text)


@settings(max_examples=400, deadline=None)
@given(masked_text, masked_text, st.integers(min_value=0, max_value=3))
def test_similar_matches_its_definition(a: str, b: str, shared: int) -> None:
    b = a[: len(a) * shared // 3] + b  # often a long common prefix, sometimes none
    assert similar(a, b) == similar_by_definition(a, b)
    assert similar(a + b, a + "x" + b) == similar_by_definition(a + b, a + "x" + b)


_LITERALS = sorted(_AUTOMATON.keys())
# Pieces of trigger literals and neighbours that make them overlap, nest and straddle lines.
_PIECES = st.sampled_from([*_LITERALS, *(t[: len(t) // 2] for t in _LITERALS), "\n", " ", "x"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=80))
def test_finder_lists_each_line_holding_a_literal_once(pieces: list[str]) -> None:
    """The one-scan finder agrees with asking every line for every literal."""
    low = "".join(pieces)
    lines = low.split("\n")
    finder = _Finder(low, lines)
    for literal in _LITERALS:
        assert finder.lines_with(literal) == [i for i, line in enumerate(lines) if literal in line]
