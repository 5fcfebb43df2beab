"""One case per compiled pattern of the proxy: its adversarial strings in every place it reads.

A pattern only sees the text its reading sends it to: the outline's patterns scan source files,
the scoring rules logs, JSON compaction the values of a document, the facts the messages a trim
dropped (whole, never compacted first) and the arguments of their tool calls. So each
pattern's strings (`bench.adversarial.regex.seeds`: runs of the characters it matches, repeats
of every prefix of a match) are put in all of those at once: a bare tool result, the same lines
between a test log's, as column-0 lines of a source file, as JSON values, as an old user
message and as an old call's arguments, all dropped at an 8k window.

Two parts, half the size each. Breadth: every seed (spread evenly over its kinds when the size
does not hold them all) as a line of SHORTEST to BREADTH characters and as many short lines:
enough for an exponential pattern, which needs ~50. Length: the likeliest few (pairs of a word
and a non-word character, `a*`, `a-`, that two adjacent quantifiers split many ways; then
prefixes of a match) as lines of up to LINE characters, where a quadratic or cubic pattern shows.
The pipeline has no cap on the line length its patterns see yet; with one, LINE is that cap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache

from bench.adversarial import regex, texts
from bench.adversarial.cases import KB, Case, Generator
from bench.adversarial.patterns import compiled_patterns
from bench.adversarial.shapes import Message, body, dropped, tool_turn

LINE = 32 * KB
BREADTH = 256
SHORTEST = 48
_WORD = re.compile(r"\w")
WINDOW = 8192
CONTEXTS = 5  # bare, log, source, JSON, dropped message (the arguments take a slice)


@cache
def patterns() -> dict[str, re.Pattern[str]]:
    return compiled_patterns()


def kinds(seeds: list[str]) -> list[list[str]]:
    """The seeds by kind, likeliest to backtrack first: pairs of a word and a non-word
    character, longer units (prefixes and whole matches), single characters, other pairs."""
    out: list[list[str]] = [[], [], [], []]
    for s in seeds:
        mixed = len(s) == 2 and bool(_WORD.match(s[0])) != bool(_WORD.match(s[1]))
        out[0 if mixed else 1 if len(s) > 2 else 2 if len(s) == 1 else 3].append(s)
    return out


def spread(groups: list[list[str]], keep: int) -> list[str]:
    """`keep` seeds taken from the groups in turn, each group's evenly over its length."""
    quota = [0] * len(groups)
    while sum(quota) < min(keep, sum(map(len, groups))):
        for i, g in enumerate(groups):
            if quota[i] < len(g) and sum(quota) < keep:
                quota[i] += 1
    return [g[j * len(g) // q] for g, q in zip(groups, quota, strict=True) for j in range(q)]


def hostile_lines(pattern: re.Pattern[str], chars: int) -> list[str]:
    """About `chars` characters of the pattern's adversarial strings, as lines: half breadth
    (every seed, short), half length (the likeliest few, long)."""
    groups = kinds(regex.seeds(pattern, limit=100_000))
    count = sum(map(len, groups))
    per = max(SHORTEST, min(BREADTH, chars // 2 // (3 * max(1, count))))
    lines: list[str] = []
    for unit in spread(groups, max(1, chars // 2 // (3 * per))):
        for _, text in regex.strings(unit, per):
            lines += text.split("\n")
    long = min(LINE, max(BREADTH, chars // 8))
    for unit in spread(groups[:2], max(1, chars // 2 // long)):
        lines.append(next(regex.strings(unit, long))[1].replace("\n", " "))
    return [line for line in lines if line]


def contexts(lines: list[str], chars: int) -> dict[str, str]:
    """The lines as each reading meets them, about `chars` characters each."""
    bare = "\n".join(lines)[:chars]
    log = texts.test_log(chars // 2).split("\n")
    mixed = "\n".join(x for pair in zip(log, lines, strict=False) for x in pair)[:chars]
    long_lines = [line for line in lines if len(line) >= SHORTEST] or lines
    source = texts.source_file(chars, hostile=long_lines)
    records: list[dict[str, object]] = []
    total = 0
    for i, line in enumerate(lines):
        total += len(line) + 40
        if records and total > chars:
            break
        records.append({"id": i, "status": "Failed", "message": line})
    document = json.dumps(records, indent=1)
    return {"bare": bare, "log": mixed, "source": source, "json": document}


def build_for(name: str) -> Callable[[int], Case]:
    def build(size: int) -> Case:
        chars = max(4 * KB, (size - 80 * KB) // CONTEXTS)
        lines = hostile_lines(patterns()[name], chars)
        found = contexts(lines, chars)
        args = json.dumps({"command": found["bare"][: chars // 4]})
        old: list[Message] = [
            {"role": "user", "content": "Run the checks."},
            *tool_turn(list(found.values()), prefix="h", args=[args]),
            {"role": "user", "content": "Earlier it printed:\n" + found["bare"]},
            {"role": "assistant", "content": "Noted; looking into it."},
        ]
        messages = dropped(old, WINDOW)
        return Case(body(messages), WINDOW)

    build.__doc__ = f"{name}'s adversarial strings in a tool result, a log, a source file, JSON, "
    build.__doc__ += "a dropped message and a dropped call's arguments."
    return build


def short_name(name: str) -> str:
    return "re:" + name.removeprefix("proxy.").removeprefix("pipeline.")


def generators() -> list[Generator]:
    return [
        Generator(short_name(name), build_for(name), "bytes", (160 * KB,), (2 * 1024 * KB,))
        for name in patterns()
    ]
