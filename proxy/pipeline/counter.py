"""CallCounter: the caller's counter with per-request memos, as the pipeline counts."""

from __future__ import annotations

from collections.abc import Callable

from proxy.pipeline import keys
from proxy.pipeline.types import Counter, Message


class CallCounter:
    """The caller's counter, plus a memo by message identity for the length of one request.

    The counter's own cache is keyed by a digest of each message; the pipeline totals the same
    messages several times per call, and digesting a 150k-token conversation again each time is
    what a warm request would otherwise spend its time on. The edge may fill it first
    (`remember`) while deciding where to run the pipeline, and pass it in as the counter.
    When the inner counter can say how it keys a message (`message_key`), the key is kept
    too: chained, the keys name each prefix of the conversation for stage 2's replay memo.
    Texts keyed here (`text_key`: the long tool results stage 1 looks up) are digested once
    per request, and their counts looked up with that key.
    """

    def __init__(self, inner: Counter):
        self.inner = inner
        self.exact = inner.exact
        # The encoding's name, in memo keys: a compaction fitted with one encoding's counts is
        # not the one another encoding needs.
        self.name: str = getattr(inner, "name", "")
        self._key: Callable[..., bytes] | None = getattr(inner, "message_key", None)
        inner_text_key = getattr(inner, "text_key", None)
        self._text_key: Callable[[str], bytes] = inner_text_key or keys.text_key
        self._keyed_counts = inner_text_key is not None  # count_text takes the key
        self._seen: dict[int, tuple[Message, int, bytes | None]] = {}
        self._texts: dict[int, tuple[str, bytes]] = {}

    def count_text(self, text: str) -> int:
        hit = self._texts.get(id(text))
        if hit is not None and hit[0] is text and self._keyed_counts:
            return self.inner.count_text(text, hit[1])  # type: ignore[call-arg]
        return self.inner.count_text(text)

    def text_key(self, text: str) -> bytes:
        """The text's content key, the one the inner counter files its count under."""
        hit = self._texts.get(id(text))
        if hit is not None and hit[0] is text:
            return hit[1]
        key = self._text_key(text)
        self._texts[id(text)] = (text, key)  # holding the text keeps its id unique
        return key

    def count_message(self, message: Message) -> int:
        hit = self._seen.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        if self._key is None:
            key, n = None, self.inner.count_message(message)
        else:
            key = self._key(message, self.text_key)
            n = self.inner.count_message(message, key)  # type: ignore[call-arg]
        self._seen[id(message)] = (message, n, key)  # holding the message keeps its id unique
        return n

    def total(self, messages: list[Message]) -> int:
        """Sum of the messages' counts (the loop inlined: the pipeline totals a long
        conversation three times per request)."""
        seen, n = self._seen, 0
        for m in messages:
            hit = seen.get(id(m))
            n += hit[1] if hit is not None and hit[0] is m else self.count_message(m)
        return n

    def remember(self, message: Message, n: int, key: bytes | None = None) -> None:
        self._seen[id(message)] = (message, n, key)

    def key_of(self, message: Message) -> bytes | None:
        """The message's cache key (None when the inner counter has none)."""
        hit = self._seen.get(id(message))
        if hit is not None and hit[0] is message and hit[2] is not None:
            return hit[2]
        return None if self._key is None else self._key(message, self.text_key)
