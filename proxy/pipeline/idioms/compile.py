"""Compile the idiom table into the structures stage 1 and the facts scan with.

Stage 1 reads a log in two scans: one combined regex over the whole text for the idioms at a
line's start (ranked by their alternatives' order: the highest kind first), and one
Aho-Corasick scan for the trigger literals of the idioms found anywhere in a line, whose patterns
then run only on the lines holding a trigger. The facts find their candidate lines the same two
ways, then classify each: an outcome, a success, a veto, then an error, in that order.
Everything here is built from the records, once: triggers are read off the patterns
(`literals`), nothing is hand-kept beside them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import ahocorasick

from proxy.pipeline.idioms.literals import triggers
from proxy.pipeline.idioms.record import KINDS, Idiom

# The categories a fact line can have, in the order a line is classified.
FACT_ORDER = ("outcomes", "successes", "veto", "errors")
# Scoring and the facts also find Python tracebacks' headers in their trigger scans.
TRACEBACK_HEADER = "traceback (most recent call last):"
# A line's start as the scans see it: its indentation, then Valgrind's `==PID==` prefix.
LINE_START = r"\n[ \t]*+(?:==\d+==[ \t]*+)?"
FACT_LINE_START = r"\n[^\S\n]*+(?:==\d+==[^\S\n]*+)?"


@dataclass(frozen=True)
class Rule:
    """An idiom found anywhere in a line, as stage 1 and the facts apply it."""

    name: str
    triggers: tuple[str, ...]
    pattern: re.Pattern[str]  # searched in the lowercased line, unless cased
    score: int  # stage 1's (0 for a fact rule)
    requires: tuple[str, ...] = ()
    cased: bool = False
    fact: str | None = None

    def matches(self, line: str, low: str) -> bool:
        """Whether the rule matches `line` (`low`: the line lowercased)."""
        return (
            any(t in low for t in self.triggers)
            and all(r in low for r in self.requires)
            and self.pattern.search(line if self.cased else low) is not None
        )


@dataclass(frozen=True)
class Compiled:
    """What the table compiles to (one per table: tests compile tables with a record removed)."""

    idioms: tuple[Idiom, ...]
    # Stage 1: the line-start scan over "\n" + text, its groups' scores, the anywhere rules and
    # the automaton of their triggers (and TRACEBACK_HEADER).
    anchored: re.Pattern[str]
    group_scores: dict[str, int]
    rules: tuple[Rule, ...]
    automaton: ahocorasick.Automaton
    # Facts: the scan for lines starting with a fact idiom (over "\n" + text), the anywhere
    # rules and their automaton (and TRACEBACK_HEADER); per category the line-start forms
    # (matched at a stripped line's start), and the outcome forms that list a group of the line.
    fact_scan: re.Pattern[str]
    fact_rules: tuple[Rule, ...]
    fact_automaton: ahocorasick.Automaton
    fact_start: dict[str, re.Pattern[str] | None]
    fact_captures: tuple[re.Pattern[str], ...]


def relax_ends(pattern: str) -> str:
    """`pattern` with each end-of-line `$` allowing blanks before it: a scan over the raw text
    sees a line's trailing blanks, which the facts' stripped lines have lost."""
    out: list[str] = []
    i, klass = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if klass:
            klass = c != "]" or (bool(out) and out[-1] in ("[", "[^"))
        elif c == "[":
            klass = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif c == "$":
            c = r"(?=[^\S\n]*$)"
        out.append(c)
        i += 1
    return "".join(out)


def _plain_groups(pattern: str) -> str:
    return pattern.replace("(?P<fact>", "(?:")


def _union(patterns: Iterable[str], start: bool = False) -> re.Pattern[str] | None:
    sources = list(patterns)
    if not sources:
        return None
    return re.compile(("^" if start else "") + "(?:" + "|".join(f"(?:{p})" for p in sources) + ")")


def _rule(idiom: Idiom) -> Rule:
    found, requires = triggers(idiom.pattern)
    if not found:
        raise ValueError(f"{idiom.name}: no literal every match holds: it cannot be triggered")
    return Rule(
        idiom.name,
        found,
        re.compile(idiom.pattern),
        idiom.kind or 0,
        requires,
        idiom.cased,
        idiom.fact,
    )


def _automaton(rules: Iterable[Rule]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for literal in {t for rule in rules for t in rule.triggers} | {TRACEBACK_HEADER}:
        automaton.add_word(literal, literal)
    automaton.make_automaton()
    return automaton


def compile_table(idioms: Iterable[Idiom]) -> Compiled:
    table = tuple(idioms)
    names = [i.name for i in table]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"idiom names must be unique: {sorted(duplicates)}")
    groups = []
    scores = {}
    for group, score in sorted(KINDS.items(), key=lambda kv: -kv[1]):
        alternatives = [
            relax_ends(_plain_groups(i.pattern))
            for i in table
            if i.kind == score and i.at == "start"
        ]
        if alternatives:
            groups.append(f"(?P<{group}>" + "|".join(alternatives) + ")")
            scores[group] = score
    anchored = re.compile(LINE_START + "(?:" + "|".join(groups) + ")", re.MULTILINE)
    rules = tuple(_rule(i) for i in table if i.kind is not None and i.at == "anywhere")
    facts = [i for i in table if i.fact is not None]
    fact_scan = re.compile(
        FACT_LINE_START
        + "(?:"
        + "|".join(
            relax_ends(_plain_groups(i.pattern))
            for i in facts
            if i.at == "start" and i.fact != "veto"
        )
        + ")",
        re.MULTILINE,
    )
    fact_rules = tuple(_rule(i) for i in facts if i.at == "anywhere")
    # Matched at the start of one stripped line (`^`: a search tries there alone).
    captures = tuple(
        re.compile(f"^(?:{i.pattern})")
        for i in facts
        if i.at == "start" and "(?P<fact>" in i.pattern
    )
    start = {
        c: _union(
            (
                i.pattern
                for i in facts
                if i.fact == c and i.at == "start" and "(?P<fact>" not in i.pattern
            ),
            start=True,
        )
        for c in FACT_ORDER
    }
    return Compiled(
        table,
        anchored,
        scores,
        rules,
        _automaton(rules),
        fact_scan,
        fact_rules,
        _automaton(fact_rules),
        start,
        captures,
    )
