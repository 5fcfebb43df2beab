"""The idiom table, walked: every record proves itself.

Each example matches its record and reaches its kind in stage 1 and its category in the facts;
no counter-example matches it; removing the record changes how one of its examples is read (so
no record is dead weight that a deletion would not reveal); its pattern reads one line, and a
line a pattern is searched in holds one of the triggers read off it.
"""

from __future__ import annotations

import re

import pytest

from bench.adversarial.regex import reads_newline
from proxy.pipeline import outcomes
from proxy.pipeline.compact.scoring import score_lines
from proxy.pipeline.idioms import COMPILED, FAMILIES, TABLE, Idiom, compile_table
from proxy.pipeline.idioms.compile import FACT_ORDER, Compiled, relax_ends
from proxy.pipeline.idioms.literals import triggers
from proxy.pipeline.idioms.record import KINDS, MARKER

IDS = [i.name for i in TABLE]


def own_match(idiom: Idiom, line: str) -> bool:
    """Whether the record's own pattern matches `line`, read as its consumers read it."""
    stripped = outcomes._bare(line.strip())
    if idiom.at == "start":
        return re.compile(idiom.pattern).match(stripped) is not None
    found, requires = triggers(idiom.pattern)
    low = stripped.lower()
    return (
        any(t in low for t in found)
        and all(r in low for r in requires)
        and re.compile(idiom.pattern).search(stripped if idiom.cased else low) is not None
    )


def fact_of(line: str, table: Compiled = COMPILED) -> str | None:
    """The category the facts give a line alone ("veto": none, though an error idiom matches)."""
    found = outcomes.error_lines(line, table)
    if found:
        return found[0][0]
    return None


def score_of(line: str, table: Compiled = COMPILED) -> int:
    return score_lines([line], table)[0]


def test_names_are_unique_and_name_their_family() -> None:
    assert len(set(IDS)) == len(IDS)
    for family in FAMILIES:
        prefix = family.__name__.rsplit(".", 1)[-1] + "."
        for idiom in family.IDIOMS:
            assert idiom.name.startswith(prefix), idiom.name


@pytest.mark.parametrize("idiom", TABLE, ids=IDS)
def test_record_is_complete(idiom: Idiom) -> None:
    assert idiom.examples, "a record carries the lines it is for"
    assert idiom.kind is not None or idiom.fact is not None, "a record that nothing reads"
    assert idiom.kind is None or idiom.kind in KINDS.values() or idiom.kind == MARKER
    if idiom.kind is None or idiom.fact is None:
        assert idiom.why, "say why stage 1 or the facts leave it alone"


@pytest.mark.parametrize("idiom", TABLE, ids=IDS)
def test_examples_match_at_their_kind_and_category(idiom: Idiom) -> None:
    for example in idiom.examples:
        assert own_match(idiom, example), example
        if idiom.kind is not None:
            assert score_of(example) >= idiom.kind, example
        if idiom.fact == "veto":
            assert fact_of(example) is None, example
        elif idiom.fact is not None:
            assert fact_of(example) == idiom.fact, example


@pytest.mark.parametrize("idiom", [i for i in TABLE if i.counter], ids=lambda i: i.name)
def test_counter_examples_do_not_match(idiom: Idiom) -> None:
    for line in idiom.counter:
        assert not own_match(idiom, line), line


@pytest.mark.parametrize("idiom", TABLE, ids=IDS)
def test_removing_the_record_changes_how_an_example_is_read(idiom: Idiom) -> None:
    """The mutation test: a record that no example needs could go without a test noticing."""
    without = compile_table(i for i in TABLE if i is not idiom)
    changed = []
    for example in idiom.examples:
        if idiom.kind is not None and score_of(example, without) < idiom.kind:
            changed.append(("kind", example))
        if idiom.fact is not None and fact_of(example, without) != fact_of(example):
            changed.append(("fact", example))
    assert changed, f"{idiom.name}: every example reads the same without it"


@pytest.mark.parametrize("idiom", [i for i in TABLE if i.at == "start"], ids=lambda i: i.name)
def test_line_start_patterns_read_one_line(idiom: Idiom) -> None:
    """The scans run these over a whole text: a class holding a newline would read on into the
    next line (and hide that line's own start from the scan)."""
    assert not reads_newline(idiom.pattern), "use [^\\S\\n] or [^x\\n], not \\s or [^x]"


@pytest.mark.parametrize("idiom", [i for i in TABLE if i.at == "anywhere"], ids=lambda i: i.name)
def test_anywhere_patterns_have_selective_triggers(idiom: Idiom) -> None:
    found, _ = triggers(idiom.pattern)
    assert found, "no literal every match holds: the line scan could not find its lines"
    assert min(map(len, found)) >= 3, found


@pytest.mark.parametrize("idiom", [i for i in TABLE if i.at == "anywhere"], ids=lambda i: i.name)
def test_every_example_holds_a_trigger(idiom: Idiom) -> None:
    found, requires = triggers(idiom.pattern)
    for example in idiom.examples:
        low = example.lower()
        assert any(t in low for t in found) and all(r in low for r in requires), example


def test_a_line_end_allows_trailing_blanks_in_the_scans() -> None:
    assert relax_ends(r"OK$") == r"OK(?=[^\S\n]*$)"
    assert relax_ends(r"[$]\$x$") == r"[$]\$x(?=[^\S\n]*$)"
    assert score_of("Ran 12 tests in 0.004s   ") >= KINDS["summary"]
    assert fact_of("Ran 12 tests in 0.004s \t") == "outcomes"


def test_fact_categories_are_known() -> None:
    assert {i.fact for i in TABLE} <= {None, *FACT_ORDER}
