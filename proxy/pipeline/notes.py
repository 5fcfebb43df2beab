"""The key lines listed under a trim marker: the facts of the span a cut drops, as text.

Stage 2 weighs many cuts of one history, each with the list of the span it drops, and does so
again every turn. Spans of one history are its prefixes (past the pinned messages), so one
`SpanFacts` read forward once serves them all, and it is remembered for the next turn under a
chain of the messages' content keys: a turn that resends the history reads only the messages
it has not read before. Each list is remembered too, so a turn whose cut holds finds its text
without picking or counting anything.

Pure: no I/O; the memo only changes what a request costs, never what it gets.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping
from typing import Any

from proxy.pipeline import keys
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.facts import CATEGORIES, MAX_FACTS, message_facts, ordered
from proxy.pipeline.span_facts import SpanFacts
from proxy.pipeline.types import Message

FACTS_INTRO = "Key lines from the omitted messages, verbatim:"
KeyOf = Callable[[Message], bytes | None]


class Notes:
    """The listed facts of every span `messages[start:k]` of one request, for stage 2's cuts."""

    def __init__(
        self,
        messages: list[Message],
        start: int,
        count_text: Callable[[str], int],
        budget: int,
        *,
        name: str = "",
        key_of: KeyOf | None = None,
        memo: MutableMapping[Hashable, Any] | None = None,
        chain: list[bytes] | None = None,
        dialect: Dialect = CHAT,
    ):
        """`budget`: tokens the list may take; `name`: the counter's encoding (a list fitted
        with one encoding's counts is not the one another needs); `key_of`: a message's
        content key, for `memo`; `chain`: keys.prefixes of `messages`, when the caller has
        it (else it is built from `key_of` when first needed)."""
        self.messages = messages
        self.start = start
        self.count_text = count_text
        self.budget = budget
        self.name = name
        self.key_of = key_of
        self.memo = memo
        self._chain = chain
        self.dialect = dialect
        self._chained = chain is not None
        self._state: SpanFacts | None = None
        self._owned = False  # whether _state is this request's own copy
        self._costs: dict[str, int] = {}

    def text(self, k: int) -> str:
        """The list under the marker of a cut at message k ("" when no fact fits)."""
        n = k - self.start
        if n <= 0 or self.budget <= 0:
            return ""
        chain = self._keys()
        key = None
        if chain is not None and self.memo is not None:
            key = ("facts-text", self.name, self.start, chain[k], self.budget)
            try:
                return self.memo[key]  # type: ignore[no-any-return]
            except KeyError:
                pass
        facts = ordered(self._read(n).select(n))
        bullets: list[str] = []
        used = self._cost(FACTS_INTRO) - 2
        for fact in facts:
            cost = self._cost(fact)
            if used + cost > self.budget:
                continue
            bullets.append(f"- {fact}")
            used += cost
        text = f"{FACTS_INTRO}\n" + "\n".join(bullets) if bullets else ""
        if key is not None and self.memo is not None:
            self.memo[key] = text
        return text

    def save(self) -> None:
        """Remember what this request read, for the next turn (which resends these messages)."""
        chain = self._keys()
        state = self._state
        if self._owned and state is not None and chain is not None and self.memo is not None:
            self.memo[("facts-state", self.start, chain[self.start + state.length])] = state
            self._owned = False  # stored: never changed again

    def _cost(self, fact: str) -> int:
        """Tokens of one bullet ("- " and the newline before it included, roughly)."""
        cost = self._costs.get(fact)
        if cost is None:
            cost = self._costs[fact] = self.count_text(fact) + 2
        return cost

    def _read(self, n: int) -> SpanFacts:
        """The facts of at least the span's first n messages."""
        state = self._state
        if state is None:
            state = self._state = self._remembered()
        if state is None:
            state = self._state = SpanFacts(CATEGORIES, MAX_FACTS)
            self._owned = True
        if state.length < n:
            if not self._owned:
                state = self._state = state.copy()
                self._owned = True
            messages, start = self.messages, self.start
            for i in range(start + state.length, start + n):
                state.add(message_facts(messages[i], dialect=self.dialect))
        return state

    def _remembered(self) -> SpanFacts | None:
        """The longest span of these messages whose facts an earlier request read."""
        chain = self._keys()
        if chain is None or self.memo is None:
            return None
        memo, start = self.memo, self.start
        for k in range(len(chain) - 1, start, -1):
            key = ("facts-state", start, chain[k])
            if key in memo:
                try:
                    return memo[key]  # type: ignore[no-any-return]
                except KeyError:  # evicted meanwhile by another thread
                    continue
        return None

    def _keys(self) -> list[bytes] | None:
        """chain[k]: the key of messages[:k] (the span's first k - start messages, and the
        pinned ones before them); None when a message has no key (then nothing is
        remembered)."""
        if not self._chained:
            self._chained = True
            if self.key_of is not None and self.memo is not None:
                self._chain = keys.prefixes(self.messages, self.key_of)
        return self._chain
