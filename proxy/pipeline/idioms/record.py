"""The record of one toolchain idiom: a shape of line that says how much the line matters.

A log line matters to a coding agent for what it says about the run: a verdict, an error, a
warning, a section. Each such shape is one `Idiom`: its pattern, the rank stage 1 gives the lines
it matches (`kind`), whether the facts list it when the message is dropped (`fact`, and `why`
when not), and examples that must match and counter-examples that must not (tests walk them).
Families of idioms (python, node, go, ...) live in their own modules; `compile` builds the fast
structures stage 1 and the facts scan with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Stage 1's scores (plain ints: selection sorts by them).
SUMMARY = 90  # verdicts: final test summary, exit code, "Successfully installed", totals
STRONG = 80  # errors: FAILED/ERROR lines, compiler errors, exception lines, npm ERR!
CONTEXT = 70  # lines right around an error or summary, the last frames of a traceback
MARKER = 60  # a marker left by an earlier compaction: cheap and tells what is missing
SECTION = 55  # big section rules (`=== FAILURES ===`) that tell where the lines came from
MEDIUM = 50  # warnings, words like "failed"/"cannot", pytest `E` and `>` lines, traceback frames
MINOR = 40  # smaller section headers (`____ test_x ____`), the rest of a traceback
NORMAL = 20
SIMILAR = 10  # the inside of a run of near-identical lines (progress, PASSED, downloads)

KINDS = {"summary": SUMMARY, "strong": STRONG, "section": SECTION, "medium": MEDIUM, "minor": MINOR}

# What the facts call a line the idiom matches: how a run ended, a closing success, an error;
# "veto": never an error fact, whatever else it matches (npm's pointer to its log file).
Fact = Literal["outcomes", "successes", "errors", "veto"]
At = Literal["start", "anywhere"]


@dataclass(frozen=True)
class Idiom:
    """One shape of line, named `family.tool.what`.

    `at="start"`: the pattern matches at the line's start, after its indentation and Valgrind's
    `==PID==` prefix; it reads that one line (no newline in any of its classes), and a `$`
    there allows trailing blanks. `at="anywhere"`: it is searched in the line, lowercased
    unless `cased` (then the pattern is written in lowercase), and only in lines holding one of
    the literals every match holds (read off the pattern: `literals.triggers`).
    A fact idiom with a group named `fact` lists that group, not the whole line.
    Every pattern runs in time linear in its line (tests/pipeline/test_idioms.py).
    """

    name: str
    pattern: str
    kind: int | None = None  # stage 1's score of a matching line; None: the facts alone read it
    fact: Fact | None = None
    examples: tuple[str, ...] = ()
    counter: tuple[str, ...] = ()
    why: str = ""
    at: At = "start"
    cased: bool = False
