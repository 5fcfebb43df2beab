"""The literals a pattern's every match holds: the triggers of an idiom found anywhere in a line.

An idiom searched anywhere in a line is tried only on the lines holding one of its triggers
(found for every idiom in one Aho-Corasick scan of the lowercased text). Hand-kept trigger lists
drift from their patterns and silently skip lines the pattern matches; these are read off the
pattern itself: a set of lowercase strings such that every match contains at least one of them.
Lookarounds count too (what they test lies in the same line). Pure.
"""

from __future__ import annotations

from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser as _p  # type: ignore[attr-defined]
from typing import Any

# A finite set of exact strings grows by cross products; past this many it is given up.
_MAX_EXACT = 24
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)


def _exact(item: tuple[Any, Any]) -> set[str] | None:
    """Every string the item can match, when that is a small finite set (lowercased)."""
    op, arg = item
    if op is _c.LITERAL:
        return {chr(arg).lower()}
    if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        return {""}  # zero width
    if op is _c.IN and len(arg) == 1 and arg[0][0] is _c.LITERAL:
        return {chr(arg[0][1]).lower()}
    if op is _c.SUBPATTERN:
        return _exact_seq(arg[3])
    if op is _c.ATOMIC_GROUP:
        return _exact_seq(arg)
    if op is _c.BRANCH:
        out: set[str] = set()
        for alt in arg[1]:
            sub = _exact_seq(alt)
            if sub is None:
                return None
            out |= sub
        return out if len(out) <= _MAX_EXACT else None
    if op in _REPEATS:
        lo, hi, sub = arg
        if hi > 1 and lo != hi:
            return None
        inner = _exact_seq(sub)
        if inner is None:
            return None
        if hi == 0:
            return {""}
        if lo == 0:
            return inner | {""}
        out = {""}
        for _ in range(lo):
            out = {a + b for a in out for b in inner}
            if len(out) > _MAX_EXACT:
                return None
        return out
    return None


def _exact_seq(items: Any) -> set[str] | None:
    out = {""}
    for item in items:
        sub = _exact(item)
        if sub is None:
            return None
        out = {a + b for a in out for b in sub}
        if len(out) > _MAX_EXACT:
            return None
    return out


def _minimal(strings: set[str]) -> set[str]:
    """Drop the strings that hold a shorter one of the set: holding the shorter one is enough."""
    return {s for s in strings if not any(t != s and t in s for t in strings)}


def _rank(found: set[str]) -> tuple[int, int]:
    return (min(map(len, found)), -len(found))


def _factors(items: Any) -> list[set[str]]:
    """Sets of literals, each of which every match of the sequence holds one of."""
    found: list[set[str]] = []

    def offer(strings: set[str] | None) -> None:
        if strings and "" not in strings:
            found.append(_minimal(strings))

    run: set[str] | None = {""}  # the exact strings of the current run of exact items
    for item in items:
        if item[0] is _c.ASSERT:  # zero width, but what it tests is in the line too
            offer(_required_item(item))
        exact = _exact(item)
        if exact is not None and run is not None:
            joined = {a + b for a in run for b in exact}
            if len(joined) <= _MAX_EXACT:
                run = joined
                continue
        offer(run)
        run = exact if exact is not None else {""}
        if exact is None:
            offer(_required_item(item))
    offer(run)
    return found


def _required(items: Any) -> set[str] | None:
    """The most selective of `_factors` (longest shortest literal, then fewest), or None."""
    factors = _factors(items)
    return max(factors, key=_rank) if factors else None


def _required_item(item: tuple[Any, Any]) -> set[str] | None:
    op, arg = item
    if op is _c.SUBPATTERN:
        return _required(arg[3])
    if op is _c.ATOMIC_GROUP:
        return _required(arg)
    if op is _c.ASSERT:  # a look-ahead or look-behind that must hold
        return _required(arg[1])
    if op in _REPEATS and arg[0] >= 1:
        return _required(arg[2])
    if op is _c.BRANCH:
        out: set[str] = set()
        for alt in arg[1]:
            sub = _required(alt)
            if not sub:
                return None
            out |= sub
        return _minimal(out)
    return None


def triggers(pattern: str, flags: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(triggers, requires) for `pattern`: lowercase literals one of which every match holds,
    the most selective set known (() when none), and other literals every match holds all of
    (each at least 3 characters: a cheap test before the pattern runs)."""
    factors = _factors(_p.parse(pattern, flags))
    if not factors:
        return (), ()
    best = max(factors, key=_rank)
    requires = {
        next(iter(f)) for f in factors if len(f) == 1 and f != best and len(next(iter(f))) >= 3
    }
    return tuple(sorted(best)), tuple(sorted(requires))
