"""Lines: fit line-oriented output (logs, listings, file dumps) into a token budget.

Most tool results are lines. Each line is counted once; lines are scored (see `scoring`), runs of
near-identical lines are demoted (see `runs`), overlong lines are cut in the middle, then a greedy
pass keeps a head and a tail and spends what is left on the best lines, charging one marker per
gap it opens. Kept lines come out in their original order with one marker per elided gap, so the
model can tell what is missing and how much. Plain text (prose, `cat -n` dumps, source files read
without numbers, documents) gets head + tail and a single marker; when it is source code, a diff,
search results or a document, that marker lists the definitions, the file and hunk headers, each
file's first match or the headings it hides (`outline`).
Everything depends only on the text, the budget and the counter.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress

from proxy.pipeline.compact import markers, outline
from proxy.pipeline.compact.runs import find_runs, last_redraw
from proxy.pipeline.compact.scoring import scores_and_repeats, signal_count, signal_lines
from proxy.pipeline.idioms.record import MEDIUM, NORMAL, SIMILAR, STRONG, SUMMARY

Count = Callable[[str], int]

# `cat -n` / `nl` output: one match per numbered line, found after a newline put in front (the
# literal `\n` lets the regex engine skip from line to line in C).
_NUMBERED = re.compile(r"\n[^\S\n]*\d+\t")
_ATTEMPTS = 5


@dataclass(frozen=True)
class Shape:
    """How to spend a budget: shares kept at each end first, and which end wins ties."""

    head_share: float
    tail_share: float
    head_weight: float  # distance multipliers: the smaller one's end is filled first
    tail_weight: float


LOG = Shape(head_share=0.1, tail_share=0.25, head_weight=2.0, tail_weight=1.0)
TEXT = Shape(head_share=0.0, tail_share=0.0, head_weight=1.0, tail_weight=1.5)


@dataclass(frozen=True)
class LinesResult:
    text: str
    kind: str  # "log" | "text"
    tokens: int
    omitted_lines: int


@dataclass
class _Lines:
    """The working set: one entry per line, in order."""

    text: list[str]
    cost: list[int]  # tokens of the line as it will be emitted, plus its newline
    original: list[int]  # tokens of the line as it came in (for markers)
    score: list[int]
    dup: list[bool]
    run: list[int]
    repeated: frozenset[int]  # the last line of each signal shape seen many times
    # Lines of the original text each entry stands for: 1, or a digest's gap (never kept).
    weight: list[int] | None = None


def _is_plain(text: str, lines: Sequence[str], scores: Sequence[int], runs: Sequence[int]) -> bool:
    """Prose or a numbered file dump: nothing in it ranks above ordinary lines."""
    nonblank = sum(map(bool, map(str.strip, lines)))
    if nonblank and len(_NUMBERED.findall("\n" + text)) >= 0.6 * nonblank:
        return True
    return signal_count(scores) == 0 and all(r < 0 for r in runs)


def _cut_long(work: _Lines, budget: int, marker_cost: int) -> None:
    """Cut every line above a cap in its middle, so one line cannot eat the budget.

    The cap is a quarter of the budget, or more when the other lines leave room (one huge
    line among a few short ones keeps most of the budget). A verdict may take half: pip's
    `Successfully installed ...` names every package, and its middle ones are as wanted as its
    ends.
    """
    base = max(24, budget // 4)
    long = [i for i, c in enumerate(work.cost) if c > base]
    if not long:
        return
    small = sum(work.cost) - sum(work.cost[i] for i in long)
    cap = max(base, int((budget * 0.85 - min(small, budget * 0.5)) / len(long)))
    for i in long:
        line_cap = max(cap, budget // 2) if work.score[i] >= SUMMARY else cap
        if work.cost[i] <= line_cap:
            continue
        keep_tokens = max(4, line_cap - marker_cost)
        line = work.text[i]
        per_token = len(line) / max(1, work.original[i])
        head = int(keep_tokens * 0.55 * per_token)
        tail = int(keep_tokens * 0.45 * per_token)
        gone = len(line) - head - tail
        gone_tokens = max(1, work.original[i] - keep_tokens)
        note = markers.chars_omitted(gone, gone_tokens)
        work.text[i] = f"{line[:head]} {note} {line[len(line) - tail :] if tail else ''}".rstrip()
        work.cost[i] = keep_tokens + marker_cost + 2


def _select(work: _Lines, budget: int, marker_cost: int, shape: Shape) -> list[bool]:
    """Greedy choice of lines: ends first, then by score, each charged with the markers it adds.

    Candidates go in rank order (score, then distance from the nearer end, the head's distance
    weighted, then position). A line above ordinary opens a gap if it must; an ordinary line is
    only taken when it touches a kept line or an end, i.e. extends a kept block.
    """
    n = len(work.text)
    cost, score, dup = work.cost, work.score, work.dup
    keep = [False] * n
    total = 0
    for indices, share in ((range(n), shape.head_share), (range(n - 1, -1, -1), shape.tail_share)):
        spent = 0
        for i in indices:
            if keep[i] or dup[i] or spent + cost[i] > budget * share:
                break
            keep[i] = True
            spent += cost[i]
            total += cost[i]
    # One marker per gap: a line not kept whose predecessor is kept or the start.
    total += marker_cost * sum(1 for i in range(n) if not keep[i] and (i == 0 or keep[i - 1]))
    hw, tw, last = shape.head_weight, shape.tail_weight, n - 1

    def rank(i: int) -> tuple[int, float, int]:
        return (-score[i], min(i * hw, (last - i) * tw), i)

    def take(i: int, opens: bool) -> bool:
        """Keep line i if its cost and the change in markers fit; `opens` allows a new gap."""
        nonlocal total
        left = i == 0 or keep[i - 1]
        right = i == last or keep[i + 1]
        delta = (1 if not left and not right else 0) - (1 if left and right else 0)
        if delta > 0 and not opens:
            return False
        extra = cost[i] + delta * marker_cost
        if total + extra > budget:
            return False
        keep[i] = True
        total += extra
        return True

    # Among warnings and other MEDIUM lines, the last of a shape seen many times
    # (`scoring._repeats` keeps the first and the last at their rank) goes after those of its
    # score: its first already said it, and a shape seen once (the one real bug in a lint
    # run's hundred style nits) says what no other line does. And a line costing an eighth of
    # the budget or more goes after the others of its score: the room of one 150-token
    # `error: command 'gcc -D... -D...'` line holds the three short errors that say why.
    later = {i for i in work.repeated if score[i] == MEDIUM}
    strong = sorted(
        (i for i in range(n) if score[i] > NORMAL and not keep[i] and not dup[i]),
        key=lambda i: (-score[i], i in later, cost[i] > budget // 8, *rank(i)[1:]),
    )
    for i in strong:
        take(i, True)
    # Ordinary lines in rank order too, but only those that touch a kept line or an end can be
    # taken, and a line's neighbours only change when it is taken: so instead of ranking every
    # line of a long log, follow the kept blocks outwards with a heap. A line whose turn came
    # before its neighbour was taken was skipped in rank order, so it is not offered again.
    heap = [
        rank(i)
        for i in range(n)
        if score[i] <= NORMAL
        and not keep[i]
        and not dup[i]
        and (i == 0 or i == last or keep[i - 1] or keep[i + 1])
    ]
    heapq.heapify(heap)
    offered = [False] * n  # each line has one turn, as in a single pass in rank order
    while heap:
        current = heapq.heappop(heap)
        i = current[2]
        if offered[i]:
            continue
        offered[i] = True
        if keep[i] or not take(i, False):
            continue
        for j in (i - 1, i + 1):
            if 0 <= j <= last and not keep[j] and not dup[j] and not offered[j]:
                key = rank(j)
                if key > current:
                    heapq.heappush(heap, key)
    return keep


def _marker(work: _Lines, start: int, end: int) -> str:
    """The note for the elided lines [start, end)."""
    n = _lines(work, start, end)
    tokens = sum(work.original[start:end]) - (end - start)
    if start > 0 and n == end - start and all(work.dup[start:end]):
        return markers.repeated(n)
    run = work.run[start]
    if start > 0 and run >= 0 and work.run[start - 1] == run and work.run[end - 1] == run:
        return markers.similar_omitted(n, tokens)
    return markers.lines_omitted(n, tokens)


def _lines(work: _Lines, start: int, end: int) -> int:
    """How many lines of the original text the entries [start, end) stand for."""
    return end - start if work.weight is None else sum(work.weight[start:end])


def _render(
    work: _Lines, keep: Sequence[bool], listed: Sequence[int] = (), what: str = ""
) -> tuple[str, int]:
    """The kept lines with a marker per gap; a gap holding `listed` lines (`what` they are:
    source definitions, a diff's headers) gets the outline marker with those lines under it."""
    out: list[str] = []
    omitted = 0
    pos, n = 0, len(keep)
    listed_at = iter(listed)
    nxt = next(listed_at, n)

    def gap(start: int, end: int) -> None:
        nonlocal nxt
        inside = []
        while nxt < end:
            inside.append(work.text[nxt])
            nxt = next(listed_at, n)
        if inside:
            tokens = sum(work.original[start:end]) - (end - start)
            head = markers.outline_head(_lines(work, start, end), tokens, what)
            out.extend((head, *inside, markers.outline_end()))
        else:
            out.append(_marker(work, start, end))

    for i in compress(range(n), keep):
        if i > pos:
            gap(pos, i)
            omitted += _lines(work, pos, i)
        out.append(work.text[i])
        pos = i + 1
    if pos < n:
        gap(pos, n)
        omitted += _lines(work, pos, n)
    return "\n".join(out), omitted


def _outlined(
    work: _Lines,
    target: int,
    marker_cost: int,
    defs: list[tuple[int, int]],
    extra: int,
    share: float = outline.SHARE,
) -> tuple[list[bool], list[int]]:
    """Head and tail of a source text in what is left after a share for its outline, and the
    definitions listed from its gap (none when the gap holds too few to be worth a list)."""
    keep = _select(work, target, marker_cost, TEXT)
    if sum(1 for i, _ in defs if not keep[i]) < outline.MIN_DEFINITIONS:
        return keep, []
    room = int(target * share)
    keep = _select(work, target - room, marker_cost, TEXT)
    gap = [(i, depth) for i, depth in defs if not keep[i]]
    listed = outline.choose(gap, work.cost, room - extra)
    if not listed:  # no definition fits the room: give it back to the head and tail
        return _select(work, target, marker_cost, TEXT), []
    return keep, listed


def line_costs(text: str, lines: list[str], count: Count) -> list[int]:
    """Each line's token cost (newline included), estimated from the whole text's count.

    Encoding every line again would cost as much as encoding the text a second time; the whole
    text is already counted (and cached) by the caller, so each line gets its share by bytes.
    Selection works on these estimates and the final output is counted exactly: an estimate
    that was too low only costs another, tighter selection round.
    """
    sizes = [
        (len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))) + 1
        for line in lines
    ]
    ratio = count(text) / max(1, sum(sizes))
    return [max(1, math.ceil(size * ratio)) for size in sizes]


@dataclass(frozen=True)
class Reading:
    """What a text is, line by line: everything compaction decides before it counts a token."""

    lines: list[str]
    scores: list[int]
    dup: list[bool]
    run: list[int]
    plain: bool
    defs: list[tuple[int, int]]  # the outline's candidates: (line, depth)
    what: str  # what the outline lists
    repeated: frozenset[int] = frozenset()  # see scoring.scores_and_repeats
    share: float = outline.SHARE  # of a budget, at most, for the outline


def read(text: str) -> Reading:
    """Score, find runs and recognise a diff, search results, source code or a document."""
    lines = [last_redraw(line) for line in text.split("\n")]
    scores, repeated = scores_and_repeats(lines)
    dup, run = find_runs(lines)
    commits = outline.commit_map(lines, text)
    diff = commits is not None or outline.is_diff(text, lines)
    files = None if diff else outline.match_files(lines)
    # A diff, a commit log or a source file is code and search results are matches, whatever
    # words they hold: no log scoring. Nor for a document without a log's errors: its map is its
    # headings.
    plain = diff or files is not None or _is_plain(text, lines, scores, run)
    heads = None
    if not diff and files is None:
        joined = "\n".join(lines)
        if outline.is_source(joined, lines, signal_lines):
            plain = True
        else:
            errors = [i for i, s in enumerate(scores) if s == STRONG]
            heads = outline.document_headings(joined, lines, errors, signal_lines)
            plain = plain or heads is not None
    n = len(lines)
    if plain:
        scores = [NORMAL] * n
        repeated = frozenset()
        dup, run = [False] * n, [-1] * n
    else:
        inside = [i for i in range(1, n - 1) if run[i] >= 0 and run[i - 1] == run[i] == run[i + 1]]
        for i in inside:
            if scores[i] <= NORMAL:
                scores[i] = SIMILAR
    if commits is not None:  # as dense as its commits are short: no table of names
        what = "commits' subjects and hashes"
        return Reading(lines, scores, dup, run, plain, commits, what, share=outline.COMMIT_SHARE)
    if diff:
        defs, what = outline.diff_map(lines), "file and hunk headers"
    elif files is not None:
        defs, what = outline.first_matches(files), "first matches in each file"
    elif heads is not None:
        defs, what = heads, "headings"
    else:
        defs, what = (outline.definitions(lines) if plain else []), "definitions"
    if not outline.MIN_DEFINITIONS <= len(defs) <= outline.MAX_DENSITY * len(lines):
        defs = []  # not code, or a table of names (a config, a data dump): no map to draw
    return Reading(lines, scores, dup, run, plain, defs, what, repeated)


def compact_lines(
    text: str,
    budget: int,
    count: Count,
    reading: Reading | None = None,
    gaps: dict[int, tuple[int, int]] | None = None,
    per_char: float = 0.25,
) -> LinesResult | None:
    """Fit `text` into `budget` tokens at line granularity; None if even that cannot fit.
    `reading`: `read(text)`, when the caller has it already. `gaps`: when `text` is a digest
    (`compact.digest`), its lines that stand for (lines, characters) of the original, whose
    tokens are estimated at `per_char`: never kept, counted into the markers."""
    r = reading or read(text)
    plain, defs, what = r.plain, r.defs, r.what
    original = line_costs(text, r.lines, count)
    dup, weight = r.dup, None
    if gaps:
        dup, weight = list(dup), [1] * len(r.lines)
        for i, (lines, chars) in gaps.items():
            dup[i], weight[i] = True, lines
            original[i] = max(1, round(chars * per_char)) + 1
    work = _Lines(list(r.lines), list(original), original, r.scores, dup, r.run, r.repeated, weight)
    marker_cost = count(markers.lines_omitted(99_999, 9_999_999)) + 1
    _cut_long(work, budget, marker_cost)
    shape = TEXT if plain else LOG
    # The outline's two marker lines, beyond the one marker its gap has anyway.
    extra = (
        count(markers.outline_head(99_999, 9_999_999, what)) + count(markers.outline_end()) + 2
        if defs
        else 0
    )
    target = budget
    for _ in range(_ATTEMPTS):
        if defs:
            keep, listed = _outlined(work, target, marker_cost, defs, extra, r.share)
        else:
            keep, listed = _select(work, target, marker_cost, shape), []
        out, omitted = _render(work, keep, listed, what)
        tokens = count(out)
        if tokens <= budget:
            return LinesResult(out, "text" if plain else "log", tokens, omitted)
        target -= tokens - budget + max(4, budget // 50)
        if target <= marker_cost:
            break
    return None
