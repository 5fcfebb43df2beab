"""Compile the idiom table into the structures stage 1 and the facts scan with.

Stage 1 reads a log in two scans: one combined regex over the whole text for the idioms at a
line's start (ranked by their alternatives' order: the highest kind first), and one
Aho-Corasick scan for the trigger literals of the idioms found anywhere in a line, whose patterns
then run only on the lines holding a trigger. The facts classify the lines their own scans find:
an outcome, a success, a veto, then an error, in that order. Everything here is built from the
records, once; nothing is hand-kept beside them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import ahocorasick

from proxy.pipeline.idioms.record import KINDS, Idiom

# The categories a fact line can have, in the order a line is classified.
FACT_ORDER = ("outcomes", "successes", "veto", "errors")
# Scoring also finds Python tracebacks' headers in the trigger scan.
TRACEBACK_HEADER = "traceback (most recent call last):"


@dataclass(frozen=True)
class Rule:
    """An idiom found anywhere in a line, as stage 1 applies it."""

    name: str
    triggers: tuple[str, ...]
    pattern: re.Pattern[str]  # searched in the lowercased line, unless cased
    score: int
    requires: tuple[str, ...] = ()
    cased: bool = False


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
    # Facts: per category, the line-start forms (matched at a stripped line's start) and the
    # anywhere forms (searched in it); the outcome forms that list a group of the line.
    fact_start: dict[str, re.Pattern[str] | None]
    fact_anywhere: dict[str, re.Pattern[str] | None]
    fact_captures: tuple[re.Pattern[str], ...]


def _union(patterns: Iterable[str], start: bool = False) -> re.Pattern[str] | None:
    sources = list(patterns)
    if not sources:
        return None
    return re.compile(("^" if start else "") + "(?:" + "|".join(f"(?:{p})" for p in sources) + ")")


def compile_table(idioms: Iterable[Idiom]) -> Compiled:
    table = tuple(idioms)
    names = [i.name for i in table]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"idiom names must be unique: {sorted(duplicates)}")
    groups = []
    scores = {}
    for group, score in sorted(KINDS.items(), key=lambda kv: -kv[1]):
        alternatives = [i.pattern for i in table if i.kind == score and i.at == "start"]
        if alternatives:
            groups.append(f"(?P<{group}>" + "|".join(alternatives) + ")")
            scores[group] = score
    anchored = re.compile(
        r"\n[ \t]*+(?:==\d+==[ \t]*+)?(?:" + "|".join(groups) + ")",
        re.MULTILINE,  # for the `$` ends of some alternatives
    )
    rules = tuple(
        Rule(i.name, i.triggers, re.compile(i.pattern), i.kind, i.requires, i.cased)
        for i in table
        if i.kind is not None and i.at == "anywhere"
    )
    automaton = ahocorasick.Automaton()
    for literal in {t for rule in rules for t in rule.triggers} | {TRACEBACK_HEADER}:
        automaton.add_word(literal, literal)
    automaton.make_automaton()
    facts = [i for i in table if i.fact is not None]
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
    anywhere = {
        c: _union(i.pattern for i in facts if i.fact == c and i.at == "anywhere")
        for c in FACT_ORDER
    }
    return Compiled(table, anchored, scores, rules, automaton, start, anywhere, captures)
