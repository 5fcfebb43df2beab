"""Digest: a huge text cut down, in bounded time and memory, to the lines compaction could keep.

Stage 1 reads a text line by line in Python, holding several lists of its lines: fine for the
logs agents usually get (at most a few hundred KB), but a 50 MB dump or a million short lines
would cost seconds and gigabytes for an output of at most a thousand tokens. A text over
`MAX_CHARS` characters or `MAX_LINES` lines is first digested: its head and tail lines, and the
lines of its middle that the idioms rank (found by stage 1's own two scans, run chunk by chunk
over the text: the line-start scan and the trigger automaton, so every line costs C-level work
only), with a line of context around each, best first, at most `MAX_PICKS`. Each gap between
them becomes one empty line standing for the lines it replaced (`Digest.gaps`), which
compaction never keeps and counts into the marker of the gap it falls in. A line longer than
`MAX_LINE` is kept as its head and tail. Everything depends on the text alone. Pure.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from proxy.pipeline.compact import markers
from proxy.pipeline.idioms import COMPILED, Compiled
from proxy.pipeline.idioms.record import MEDIUM
from proxy.pipeline.work import Work, check

MAX_CHARS = 1_000_000
MAX_LINES = 20_000
MAX_LINE = 8_192  # characters of one line kept for reading: its head and tail
HEAD_LINES = 600
TAIL_LINES = 1_000
EDGE_CHARS = 128 * 1024  # head or tail, at most
MAX_PICKS = 2_000  # ranked lines from the middle (each with a line of context on both sides)
CHUNK = 1 << 16  # the middle is read in pieces of about this many characters (each one C call
# of the line-start scan holds the GIL: 64K characters of one-character lines take ~50 ms)


@dataclass(frozen=True)
class Digest:
    text: str
    gaps: dict[int, tuple[int, int]]  # line of `text` -> (lines, characters) it stands for
    lines: int  # lines of the original text


def needed(text: str) -> bool:
    return len(text) > MAX_CHARS or text.count("\n") >= MAX_LINES


def _line_at(text: str, start: int) -> tuple[int, int]:
    end = text.find("\n", start)
    return start, len(text) if end < 0 else end


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE:
        return line
    half = MAX_LINE // 2
    gone = len(line) - 2 * half
    return f"{line[:half]} {markers.chars_omitted(gone, max(1, gone // 4))} {line[-half:]}"


def _edge_end(text: str, lines: int, start: int, forward: bool) -> int:
    """Where the head (forward) ends or the tail starts: after `lines` lines or EDGE_CHARS."""
    if forward:
        pos = start
        for _ in range(lines):
            nxt = text.find("\n", pos, start + EDGE_CHARS)
            if nxt < 0:
                return min(len(text), max(pos, text.rfind("\n", start, start + EDGE_CHARS) + 1))
            pos = nxt + 1
        return pos
    pos = len(text)
    floor = max(start, len(text) - EDGE_CHARS)
    for _ in range(lines):
        prev = text.rfind("\n", floor, pos - 1 if pos > floor else floor)
        if prev < 0:
            return max(start, text.find("\n", floor) + 1 if floor > start else start)
        pos = prev + 1
    return max(start, pos)


def _ranked(
    text: str, lo: int, hi: int, table: Compiled, work: Work | None
) -> list[tuple[int, int]]:
    """(score, line start) of the lines in text[lo:hi] (starting at line starts) that rank at
    MEDIUM or above, the best MAX_PICKS (then the earliest)."""
    picks: list[tuple[int, int]] = []  # a min-heap of (score, -start): the worst on top
    anchored, scores, rules = table.anchored, table.group_scores, table.rules
    automaton = table.automaton

    def offer(score: int, start: int) -> None:
        item = (score, -start)
        if len(picks) < MAX_PICKS:
            heapq.heappush(picks, item)
        elif item > picks[0]:
            heapq.heapreplace(picks, item)

    pos = lo
    while pos < hi:
        check(work)
        end = min(hi, pos + CHUNK)
        if end < hi:
            cut = text.rfind("\n", pos, end)
            end = cut + 1 if cut > pos else end
        found: dict[int, int] = {}
        # The line-start scan wants a newline before each line: the one ending the line before.
        for m in anchored.finditer(text, pos - 1 if pos else 0, end):
            start = m.start() + 1 if text[m.start()] == "\n" else m.start()
            found[start] = max(found.get(start, 0), scores[m.lastgroup or "minor"])
        low = text[pos:end].lower()
        if len(low) == end - pos:  # else a lowercase changed length ("İ"): line-start scan only
            lines_hit: dict[int, set[str]] = {}
            for at, literal in automaton.iter(low):
                start = low.rfind("\n", 0, at) + 1
                lines_hit.setdefault(start, set()).add(literal)
            for start, literals in lines_hit.items():
                s, e = _line_at(text, pos + start)
                line = text[s : min(e, s + MAX_LINE)]
                low_line = low[start : start + len(line)]
                for rule in rules:
                    if found.get(s, 0) >= rule.score or literals.isdisjoint(rule.triggers):
                        continue
                    if rule.matches(line, low_line):
                        found[s] = rule.score
        for start, score in found.items():
            if score >= MEDIUM:
                offer(score, start)
        pos = end
    return sorted((s, -neg) for s, neg in picks)


def digest(text: str, table: Compiled = COMPILED, work: Work | None = None) -> Digest:
    """The digest of a text that `needed` says is too big to read line by line."""
    head_end = _edge_end(text, HEAD_LINES, 0, True)
    tail_start = max(head_end, _edge_end(text, TAIL_LINES, head_end, False))
    starts: set[int] = set()
    for _, start in _ranked(text, head_end, tail_start, table, work):
        starts.add(start)
        before = text.rfind("\n", head_end, max(head_end, start - 1))
        if start > head_end:
            starts.add(before + 1 if before >= 0 else head_end)
        _, end = _line_at(text, start)
        if end + 1 < tail_start:
            starts.add(end + 1)
    kept = sorted(s for s in starts if head_end <= s < tail_start)
    out: list[str] = text[:head_end].split("\n")
    if head_end and text[head_end - 1] == "\n":
        out.pop()  # the head ends with its newline: no empty line after it
    out = [_clip(line) for line in out]
    gaps: dict[int, tuple[int, int]] = {}
    pos = head_end
    for start in [*kept, tail_start]:
        if start > pos:
            lines = text.count("\n", pos, start)
            if start == tail_start and tail_start == len(text):
                lines += 1  # the gap runs to the end of the text
            gaps[len(out)] = (max(1, lines), start - pos)
            out.append("")
        if start == tail_start:
            break
        s, e = _line_at(text, start)
        out.append(_clip(text[s:e]))
        pos = e + 1
    out.extend(_clip(line) for line in text[tail_start:].split("\n") if tail_start < len(text))
    total = text.count("\n") + 1
    return Digest("\n".join(out), gaps, total)
