"""Adversarial strings for regular expressions, and a check that a pattern stays linear on them.

Python's `re` backtracks: a pattern with nested or adjacent unbounded quantifiers over the same
characters can take quadratic or exponential time on text nobody controls (tool output). This
module reads a compiled pattern's own parse tree and builds the strings most likely to make it
work hard: long runs of each character it can match, and repeats of every prefix of a match
(each alternative's too), bare and as lines. `measure` times the pattern over growing sizes of
each string, stopping as soon as the growth stops looking linear, so an exponential pattern is
caught at a few dozen characters instead of hanging the run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

# Characters tried, in order, when a pattern item is a class: the first one it accepts.
_POOL = " a1Z_.-:/=*+(\t\"'#@,;|<>[]{}!?%&$~^`\\é✕中😀\x00"
_WORD = re.compile(r"\w")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s")


def _in_category(c: str, cat: Any) -> bool:
    name = str(cat)
    if "NOT_DIGIT" in name:
        return not _DIGIT.match(c)
    if "DIGIT" in name:
        return bool(_DIGIT.match(c))
    if "NOT_WORD" in name:
        return not _WORD.match(c)
    if "WORD" in name:
        return bool(_WORD.match(c))
    if "NOT_SPACE" in name:
        return not _SPACE.match(c)
    if "SPACE" in name:
        return bool(_SPACE.match(c))
    if "NOT_LINEBREAK" in name:
        return c != "\n"
    if "LINEBREAK" in name:
        return c == "\n"
    return False


def _in_set(c: str, items: list[Any]) -> bool:
    negate = False
    hit = False
    for op, arg in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            hit = hit or ord(c) == arg
        elif op is C.RANGE:
            hit = hit or arg[0] <= ord(c) <= arg[1]
        elif op is C.CATEGORY:
            hit = hit or _in_category(c, arg)
    return hit != negate


def _chars_of(op: Any, arg: Any) -> list[str]:
    """Characters a single-character item accepts (a few, from the pool, or its literal)."""
    if op is C.LITERAL:
        return [chr(arg)]
    if op is C.NOT_LITERAL:
        return [c for c in _POOL if ord(c) != arg][:2]
    if op is C.ANY:
        return ["a", " "]
    if op is C.IN:
        found = [c for c in _POOL if _in_set(c, arg)]
        for sub, value in arg:  # a class's own literals and range ends come first
            if sub is C.LITERAL:
                found.insert(0, chr(value))
            elif sub is C.RANGE:
                found.insert(0, chr(value[0]))
        if any(sub is C.NEGATE for sub, _ in arg):
            found = [c for c in found if _in_set(c, arg)]
        return list(dict.fromkeys(found))[:3]
    if op is C.CATEGORY:
        return [c for c in _POOL if _in_category(c, arg)][:2]
    return []


def _walk(items: Any, out: set[str]) -> None:
    for op, arg in items:
        chars = _chars_of(op, arg)
        if chars:
            out.update(chars)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            _walk(arg[2], out)
        elif op is C.SUBPATTERN:
            _walk(arg[3], out)
        elif op is C.ATOMIC_GROUP:
            _walk(arg, out)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _walk(arg[1], out)
        elif op is C.BRANCH:
            for alt in arg[1]:
                _walk(alt, out)


def _gen(items: Any, reps: int, pick: int = 0) -> str:
    """One string matching `items`, unbounded repeats taken `reps` times; branch `pick`."""
    out: list[str] = []
    for op, arg in items:
        chars = _chars_of(op, arg)
        if chars:
            out.append(chars[pick % len(chars)])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = arg
            n = max(lo, min(hi, reps))
            out.append(_gen(sub, reps, pick) * n)
        elif op is C.SUBPATTERN:
            out.append(_gen(arg[3], reps, pick))
        elif op is C.ATOMIC_GROUP:
            out.append(_gen(arg, reps, pick))
        elif op is C.BRANCH:
            alts = arg[1]
            out.append(_gen(alts[pick % len(alts)], reps, pick))
        elif op is C.AT and arg in (C.AT_BEGINNING_LINE,):
            pass
    return "".join(out)


def _prefixes(items: Any, head: str, found: list[str], limit: int) -> None:
    """head + every prefix of each way through `items` (each alternative of each branch)."""
    acc = head
    for op, arg in items:
        if len(found) >= limit:
            return
        if op is C.BRANCH:
            for alt in arg[1]:
                _prefixes(alt, acc, found, limit)
            acc += _gen([(op, arg)], 2)
        elif op is C.SUBPATTERN:
            _prefixes(arg[3], acc, found, limit)
            acc += _gen(arg[3], 2)
        elif op is C.ATOMIC_GROUP:
            _prefixes(arg, acc, found, limit)
            acc += _gen(arg, 2)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = arg
            for reps in (1, 2, 3):
                found.append(acc + _gen(sub, 2) * min(reps, hi if hi else reps))
            _prefixes(sub, acc, found, limit)
            acc += _gen([(op, arg)], 2)
        else:
            acc += _gen([(op, arg)], 2)
        if acc:
            found.append(acc)


def seeds(pattern: re.Pattern[str], limit: int = 400) -> list[str]:
    """The units the adversarial strings repeat: each character the pattern can match, each
    prefix of a match of each of its alternatives, and a few whole matches."""
    tree = P.parse(pattern.pattern, pattern.flags)
    chars: set[str] = set()
    _walk(tree, chars)
    found: list[str] = sorted(chars)
    pre: list[str] = []
    _prefixes(tree, "", pre, limit)
    found += pre
    for reps in (1, 3):
        for pick in range(3):
            found.append(_gen(tree, reps, pick))
    # Pairs of the characters the pattern can match (`a*` for `(?:[a-z][\w*]*[ *]+)+`): runs
    # that two adjacent quantifiers can split between them in many ways.
    pool = sorted(chars)
    found += [a + b for a in pool for b in pool if a != b]
    # A lone surrogate (a class's range may hold one) has no UTF-8 form: no body can carry it.
    unique = [s for s in dict.fromkeys(found) if s and not _SURROGATE.search(s)]
    return unique[:limit]


def strings(unit: str, size: int) -> Iterator[tuple[str, str]]:
    """(label, text): `unit` repeated to `size` characters, bare, as lines, and spaced."""
    n = max(1, size // max(1, len(unit)))
    yield "repeat", unit * n
    if "\n" not in unit:
        line = unit.strip("\n")
        if line:
            yield "lines", ("\n" + line) * max(1, size // (len(line) + 1))
            yield "spaced", (line + " ") * max(1, size // (len(line) + 1))
            # One long line, as a line-anchored scan meets it (`\n` first).
            yield "line", "\n" + line * max(1, (size - 1) // len(line))
    elif unit.startswith("\n") and len(unit) > 3:
        # A line's start once, then the rest of it repeated: one long line holding what the
        # pattern looks for after that start many times (`=+ [^\n]*word[^\n]* =+$`).
        for cut in sorted({2, 3, len(unit) // 2}):
            rest = unit[cut:].replace("\n", " ")
            if rest.strip():
                yield f"infix{cut}", unit[:cut] + rest * max(1, (size - cut) // len(rest))


@dataclass(frozen=True)
class Finding:
    label: str
    unit: str
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    @property
    def exponent(self) -> float:
        """Growth of time with size (1: linear), from the first size timed over 0.2 ms (or the
        one before the largest) to the largest."""
        import math

        if len(self.seconds) < 2:
            return 0.0
        first = next(
            (k for k, t in enumerate(self.seconds[:-1]) if t > 2e-4), len(self.seconds) - 2
        )
        n1, n2 = self.sizes[first], self.sizes[-1]
        t1, t2 = self.seconds[first], self.seconds[-1]
        if n2 <= n1:
            return 0.0
        return math.log(max(t2, 1e-7) / max(t1, 1e-7)) / math.log(n2 / n1)


def timed(run: Callable[[str], Any], text: str, repeat: int = 3) -> float:
    """The least CPU time of this thread over `repeat` runs: other processes on a loaded
    machine take the core away between runs, not out of them."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        run(text)
        best = min(best, time.thread_time() - start)
    return best


def scan(pattern: re.Pattern[str]) -> Callable[[str], Any]:
    """The costliest use of a pattern: every match over the whole text."""

    def run(text: str) -> None:
        for _ in pattern.finditer(text):
            pass

    return run


def measure(
    run: Callable[[str], Any],
    unit: str,
    sizes: tuple[int, ...] = (256, 1024, 4096, 16384, 65536),
    stop: float = 0.05,
) -> list[Finding]:
    """Time `run` over each string built from `unit` at growing sizes. A string stops growing
    once a size takes longer than `stop` seconds, or once it grows faster than ~n^1.6 between
    two sizes both over 0.2 ms (the next size could then take minutes). The exponent of a
    finding is read between the largest size and the first size over 0.2 ms (a wide span: the
    noise of a loaded machine moves it little)."""
    out: list[Finding] = []
    for label, _ in strings(unit, sizes[0]):
        done_sizes: list[int] = []
        done_secs: list[float] = []
        for size in sizes:
            text = dict(strings(unit, size))[label]
            t = timed(run, text, repeat=3 if size <= 16384 else 2)
            done_sizes.append(len(text))
            done_secs.append(t)
            if t > stop:
                break
            if len(done_secs) >= 2 and done_secs[-2] > 2e-4:
                if Finding(label, unit, tuple(done_sizes), tuple(done_secs)).exponent > 1.6:
                    break
        out.append(Finding(label, unit, tuple(done_sizes), tuple(done_secs)))
    return out


def reads_newline(pattern: str, flags: int = 0) -> bool:
    """Whether some item of `pattern` can match a newline (a class or category holding one, a
    negated literal, `.` under DOTALL): a pattern meant for one line must not."""

    def walk(items: Any) -> bool:
        for op, arg in items:
            if op is C.IN and _in_set("\n", arg):
                return True
            if op is C.NOT_LITERAL and arg != 10:
                return True
            if op is C.CATEGORY and _in_category("\n", arg):
                return True
            if op is C.ANY and flags & re.DOTALL:
                return True
            if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT) and walk(arg[2]):
                return True
            if op is C.SUBPATTERN and walk(arg[3]):
                return True
            if op is C.ATOMIC_GROUP and walk(arg):
                return True
            if op is C.BRANCH and any(walk(alt) for alt in arg[1]):
                return True
        return False

    return walk(P.parse(pattern, flags))


# A scan every linear pattern is measured against: it visits each character once and makes a
# match per word, as a tokenizer's pre-split does.
REFERENCE = re.compile(r"\w+|[^\w\s]+|\s+")


@dataclass(frozen=True)
class Verdict:
    """How a pattern fared on its worst adversarial string."""

    label: str
    unit: str
    growth: float  # its time's growth from the small to the large size, over the reference's
    ratio: float  # its time at the large size, in reference scans of the same string
    seconds: float  # its time at the large size
    exploded: bool  # stopped early: superlinear at a small size

    def linear(self, max_growth: float = 4.0) -> bool:
        """Its time grew about as fast as the reference scan's (quadratic: 8 times as fast)."""
        return not self.exploded and self.growth <= max_growth


def _ladder(run: Callable[[str], Any], unit: str, label: str, top: int) -> tuple[bool, float]:
    """Time `run` on the string at doubling sizes up to `top`; (exploded, seconds at `top`).
    Doubling keeps an exponential pattern from being tried at a size that would never end: it
    is caught where one doubling multiplies its time by more than 16 and costs over 20 ms, or
    any size costs over half a second (timed again, min of 3: a loaded machine's pauses, and
    caches outgrown, are no explosion; a quadratic pattern's 4x per doubling is what
    `check_linear`'s growth measures, below that half second)."""
    size, last = 64, 0.0
    while True:
        text = dict(strings(unit, size))[label]
        t = timed(run, text, repeat=1)
        if t > 0.5 or (t > 0.02 and t > 16 * last):
            t = timed(run, text, repeat=3)
            if t > 0.5 or (t > 0.02 and t > 16 * last):
                return True, t
        if size >= top:
            return False, t
        last, size = t, size * 2


def check_linear(
    pattern: re.Pattern[str],
    units: list[str] | None = None,
    rank: int = 2048,
    small: int = 8192,
    large: int = 65536,
    worst: int = 3,
) -> Verdict:
    """The pattern's worst case over adversarial strings (`seeds` by default): every string is
    grown up to `rank` characters; the `worst` slowest are then timed at `small` and `large`
    against `REFERENCE` on the same strings (min of 3, interleaved), and the worst growth wins.
    Linear: about 1; quadratic: large / small (8)."""
    run, ref = scan(pattern), scan(REFERENCE)
    candidates: list[tuple[float, str, str]] = []
    for unit in units if units is not None else seeds(pattern):
        for label, _ in strings(unit, 64):
            exploded, t = _ladder(run, unit, label, rank)
            if exploded:
                return Verdict(label, unit, float("inf"), float("inf"), t, True)
            candidates.append((t, label, unit))
    candidates.sort(reverse=True)
    verdict = Verdict("", "", 0.0, 0.0, 0.0, False)
    for _, label, unit in candidates[:worst]:
        exploded, _ = _ladder(run, unit, label, large)
        if exploded:
            return Verdict(label, unit, float("inf"), float("inf"), 0.0, True)
        found = _growth(run, ref, unit, label, small, large)
        for _ in range(3):  # a loaded machine's pause inflates one measure, never every one
            if found.linear():
                break
            again = _growth(run, ref, unit, label, small, large)
            found = again if again.growth < found.growth else found
        if (found.growth, found.ratio) > (verdict.growth, verdict.ratio):
            verdict = found
    return verdict


def _growth(
    run: Callable[[str], Any],
    ref: Callable[[str], Any],
    unit: str,
    label: str,
    small: int,
    large: int,
) -> Verdict:
    a, b = dict(strings(unit, small))[label], dict(strings(unit, large))[label]
    tp1 = tr1 = tp2 = tr2 = float("inf")
    for _ in range(3):
        tp1, tr1 = min(tp1, timed(run, a, 1)), min(tr1, timed(ref, a, 1))
        tp2, tr2 = min(tp2, timed(run, b, 1)), min(tr2, timed(ref, b, 1))
    growth = (tp2 / max(tp1, 2e-6)) / max(tr2 / max(tr1, 2e-6), 1e-9)
    return Verdict(label, unit, growth, tp2 / max(tr2, 1e-9), tp2, False)
