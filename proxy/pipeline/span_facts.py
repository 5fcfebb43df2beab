"""The facts of every prefix of a growing span, from one pass over its messages.

`proxy.pipeline.facts` picks a span's facts category by category: each message's first few facts
of the category in turn, up to the category's quota and the list's limit, then the room left
goes to the leftovers in the same order. Within one category a fact seen earlier in the span can
never be picked again (it was taken, refused, or is a leftover behind its first sight), so what a
pick reads of a category is a prefix of that category's distinct facts in order of first sight,
and that list for a longer span extends the list for a shorter one. One pass over the messages
then serves the pick of every prefix: each fact records the message it was first seen in, and the
pick for the first k messages reads the facts seen before k. Stage 2 weighs many cuts of one
history, each with the facts of the span it drops: this makes them one extraction per message in
all, instead of one per message per cut.

The lists are bounded: a category keeps its first `quota + 2 * limit` distinct facts. A pick reads
past that only when more than `limit` of one category's facts are refused, each a copy or a
substring of a fact taken before it, which takes a crafted span; then that pick may differ from
an unbounded one. Whether a kept fact is a partial line (clipped, or cut by stage 1) depends on
every message of the span, so the first message where each fact was partial is kept too: for
every listed fact, and for up to PARTIAL_CAP others (a fact listed later in another category).

Pure: no I/O; a stored state is never changed (extend a `copy`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

# One message's facts: per category, its first few distinct facts (clipped) in order, and
# those of them that are partial lines.
MessageFacts = Mapping[str, tuple[list[str], set[str]]]
Quotas = Mapping[str, tuple[int, int]]
PARTIAL_CAP = 4096


class Selection(NamedTuple):
    kept: list[str]  # in the order they were picked
    ranks: dict[str, int]  # each fact's category rank; past len(quotas): the second round
    partial: set[str]  # the kept facts that are partial lines
    any_partial: bool  # whether the span holds a partial line at all (kept or not)


class SpanFacts:
    """Distinct facts per category with the position of the message they were first seen in."""

    __slots__ = ("quotas", "limit", "length", "_lists", "_caps", "_partial", "_first_partial")

    def __init__(self, quotas: Quotas, limit: int):
        self.quotas = quotas
        self.limit = limit
        self.length = 0  # messages added
        # Insertion-ordered: fact -> position of its first sight.
        self._lists: dict[str, dict[str, int]] = {c: {} for c in quotas}
        self._caps = {c: max(quota, 0) + 2 * max(limit, 0) for c, (quota, _) in quotas.items()}
        self._partial: dict[str, int] = {}  # fact -> first position where it is partial
        self._first_partial: int | None = None

    def copy(self) -> SpanFacts:
        other = SpanFacts(self.quotas, self.limit)
        other.length = self.length
        other._lists = {c: dict(items) for c, items in self._lists.items()}
        other._partial = dict(self._partial)
        other._first_partial = self._first_partial
        return other

    @property
    def memo_chars(self) -> int:
        """About what the state holds, in characters (for a memo bounded by them)."""
        chars = sum(len(f) + 60 for items in self._lists.values() for f in items)
        return chars + sum(len(f) + 60 for f in self._partial)

    def add(self, found: MessageFacts | None) -> None:
        """Append the next message of the span (None: a message with no facts)."""
        at = self.length
        self.length += 1
        if not found:
            return
        partial: list[str] = []
        for category, (facts, partial_here) in found.items():
            items = self._lists.get(category)
            if items is None:
                continue
            room = self._caps[category] - len(items)
            for fact in facts:
                if room <= 0:
                    break
                if fact not in items:
                    items[fact] = at
                    room -= 1
            partial += sorted(partial_here)  # sorted: the same order in every process
        if not partial:
            return
        if self._first_partial is None:
            self._first_partial = at
        for fact in partial:
            if fact in self._partial:
                continue
            if len(self._partial) < PARTIAL_CAP or any(fact in i for i in self._lists.values()):
                self._partial[fact] = at

    def select(self, k: int) -> Selection:
        """The pick of `facts._select` for the span's first `k` messages."""
        limit = self.limit
        kept: list[str] = []
        seen: set[str] = set()
        ranks: dict[str, int] = {}

        def take(fact: str, rank: int) -> bool:
            if not fact or fact in seen:
                return False
            seen.add(fact)
            ranks[fact] = rank
            if any(fact in k for k in kept):
                return False
            kept[:] = [k for k in kept if k not in fact]
            kept.append(fact)
            return True

        rest: list[Iterator[tuple[str, int]]] = []  # each category's leftovers
        for rank, (category, (quota, _)) in enumerate(self.quotas.items()):
            items = _before(self._lists[category], k)
            taken = 0
            while taken < quota and len(kept) < limit:
                item = next(items, None)
                if item is None:
                    break
                taken += take(item[0], rank)
            rest.append(items)
        second = len(self.quotas)
        for rank, items in enumerate(rest):
            for fact, _ in items:
                if len(kept) >= limit:
                    break
                take(fact, rank + second)
            if len(kept) >= limit:
                break
        partial = {f for f in kept if self._partial.get(f, k) < k}
        first = self._first_partial
        return Selection(kept, ranks, partial, first is not None and first < k)


def _before(items: dict[str, int], k: int) -> Iterator[tuple[str, int]]:
    """The facts first seen before position k, in order (positions never decrease)."""
    for item in items.items():
        if item[1] >= k:
            return
        yield item
