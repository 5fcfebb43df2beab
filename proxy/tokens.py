"""Token counting: which encoding a model uses, cached per-message counts, a fallback estimate.

Boundary: this module loads tiktoken encoding files from a cache directory the caller resolved (it
never reads the environment or settings) and counts chat messages the way OpenAI documents it (3
tokens per message, 1 per name, 3 to prime the reply). When an encoding file is not available
offline it never reaches for the network unless told to: it falls back to a labelled estimate,
`ceil(utf-8 bytes / 4)`, and says so once in the log.

Agents resend the whole history on every turn, so per-message counts are cached by a digest of
the message's content: a new turn costs digesting the history (tens of times cheaper than
encoding it) plus counting only its new messages.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, cast

import orjson
import tiktoken
import tiktoken.load

from proxy import pieces
from proxy.pieces import utf8_length
from proxy.pipeline import keys

logger = logging.getLogger(__name__)

O200K = "o200k_base"
CL100K = "cl100k_base"
ESTIMATE = "estimate"

# OpenAI's documented chat overhead (openai-cookbook, "How to count tokens with tiktoken").
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
# Fixed costs for media parts: the real cost depends on size/detail/duration, which we do not
# decode. 85 is a low-detail image tile; audio gets the same placeholder.
IMAGE_TOKENS = 85
AUDIO_TOKENS = 85
# Texts at least this long go through the count cache: keying 1 KB costs ~3-5 us, encoding it
# ~100 us (bench/tokens_cache.py, on a loaded machine); below it, keying, the lock and the dict
# cost too large a share of what they save.
TEXT_CACHE_MIN_CHARS = 1024

# Families that use o200k_base, after the provider prefix and `ft:` are stripped. tiktoken's own
# table (tiktoken.model) misses provider prefixes and newer names, hence our own. gpt-oss uses
# o200k_harmony, whose ordinary tokens are o200k_base's.
_O200K_FAMILIES = (
    *("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss"),
    *("o1", "o3", "o4"),
)


# --- model -> encoding ----------------------------------------------------------------------------


def encoding_for_model(model: str | None) -> str:
    """`o200k_base` for the gpt-4o/4.1/4.5/5 and o-series families (any provider prefix, dated
    suffix or `ft:` form), `cl100k_base` for everything else (an approximation for local models)."""
    if not isinstance(model, str):
        return CL100K
    name = model.strip().lower().rsplit("/", 1)[-1]  # openai/gpt-4o, azure/gpt-4o, a/b/gpt-5
    name = name.removeprefix("ft:")
    for family in _O200K_FAMILIES:
        if name.startswith(family):
            rest = name[len(family) :]
            # `gpt-4o-mini`, `o1-2024-12-17`, `gpt-5.1`, `gpt-oss:20b`, but not `o10` or `gpt-4.10`.
            if not rest or not rest[0].isalnum():
                return O200K
    return CL100K


# --- cheap bounds ---------------------------------------------------------------------------------


def upper_bound_bytes(n_bytes: int) -> int:
    """Most tokens a text of `n_bytes` UTF-8 bytes can take without special tokens.

    Every BPE token of cl100k_base/o200k_base covers at least one byte, and special tokens are
    never produced (we encode with `encode_ordinary`), so tokens <= bytes. The estimate, bytes / 4,
    is lower still. Per-message overhead is not included.
    """
    return max(n_bytes, 0)


def fits_by_bytes(text: str, max_tokens: int) -> bool:
    """True only when `text` certainly fits in `max_tokens`; False means "go and count"."""
    if max_tokens < 0:
        return False
    if len(text) * 4 <= max_tokens:  # a code point is at most 4 UTF-8 bytes: no need to encode
        return True
    return upper_bound_bytes(utf8_length(text)) <= max_tokens


def estimate_tokens(text: str) -> int:
    """The fallback: ceil(utf-8 bytes / 4), roughly what BPE gives on English prose and code.
    The bytes are counted without a copy of the text (pieces.utf8_length)."""
    return -(-utf8_length(text) // 4)


# --- serialisation helpers ------------------------------------------------------------------------


def _as_text(value: Any) -> str:
    """A non-string value as counted: compact JSON, or str() of what JSON refuses. Never raises."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: non-str keys, big ints, lone surrogates, objects
        pass
    # Junk from a client must not take the request down with it: any exception (a raising __str__,
    # a 5000-digit int, a cycle) moves on to a cruder form.
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        pass
    try:
        return str(value)
    except Exception:
        return object.__repr__(value)


def text_key(text: str, kind: str = "t") -> bytes:
    """Cache key of a text: a digest of its UTF-8 bytes, in the namespace `kind`
    (proxy.pipeline.keys: never Python's hash() alone, which can be made to collide)."""
    return keys.text_key(text, kind.encode())


def message_key(message: Any, text_key: Callable[[str], bytes] = text_key) -> bytes:
    """Key of a message's content, so re-sent messages hit the cache (and, chained, the key of a
    conversation prefix: stage 2's replay memo).

    A digest of its JSON with sorted keys, so key order never matters: a client that rebuilds
    its messages must still hit. Values that differ in JSON differ in key (1, 1.0 and true are
    three keys; NaN has no JSON spelling of its own and keys like null, but the wire's JSON
    cannot carry it). What JSON refuses is keyed by a cruder rendering, in its own namespace.
    A long text content is keyed by its `text_key` (which the caller may have memoized: the
    same text is looked up again for its own count and stage 1's memo), the rest by its JSON.
    """
    if type(message) is dict:
        content = message.get("content")
        if type(content) is str and len(content) >= TEXT_CACHE_MIN_CHARS:
            rest = {k: v for k, v in message.items() if k != "content"}
            try:
                data = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)
            except TypeError:
                pass
            else:  # the text's key is always the last SIZE bytes: no ambiguity
                return keys.digest(b"m", data + text_key(content))
    try:
        return keys.digest(b"j", orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
    except TypeError:
        pass
    try:
        text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=repr)
        return keys.digest(b"p", text.encode("utf-8", "surrogatepass"))
    except Exception:  # mixed-type keys, cycles, a raising __repr__: see _as_text
        return keys.digest(b"s", _as_text(message).encode("utf-8", "surrogatepass"))


# --- the counter ----------------------------------------------------------------------------------


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int


class TokenCounter:
    """Counts text, messages and tool definitions with one encoding (`encoding=None`: the estimate).

    Satisfies `proxy.pipeline.types.Counter`. Thread-safe: the cache is guarded by a lock; counting
    itself runs outside it.
    """

    def __init__(
        self,
        name: str,
        encoding: tiktoken.Encoding | None,
        *,
        cache_size: int = 20_000,
        note: str | None = None,
    ) -> None:
        self.name = name
        self.encoding = encoding
        self.exact = encoding is not None
        # Whether long texts may be counted in pieces: the cuts hold for these patterns only.
        self._pieces = getattr(encoding, "_pat_str", None) in pieces.PATTERNS
        # Why counts are not exact, for the report; None for a real encoding.
        self.note = note
        self._cache_size = max(cache_size, 0)
        self._cache: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight] = {}
        self._hits = 0
        self._misses = 0

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, exact={self.exact})"

    # public API

    def count_text(self, text: str, key: bytes | None = None) -> int:
        """`key`: the text's `text_key`, when the caller has it already."""
        if not isinstance(text, str):
            text = _as_text(text)
        if len(text) < TEXT_CACHE_MIN_CHARS:
            return self._len(text)
        return self._cached(key or text_key(text), lambda: self._len(text))

    # The key the cache files a text under (counted or not, whatever its length).
    text_key = staticmethod(text_key)

    # The key the cache files a message under; callers that need it too compute it once.
    message_key = staticmethod(message_key)

    def count_message(self, message: Mapping[str, Any], key: bytes | None = None) -> int:
        """Tokens of one chat message, overhead included. Junk is counted by its JSON/str form.
        `key`: the message's `message_key`, when the caller has it already."""
        if key is None:
            key = message_key(message)
        return self._cached(key, lambda: self._count_message(message))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """A whole prompt: every message plus the tokens that prime the assistant's reply."""
        if messages is None:
            return REPLY_PRIMING
        if isinstance(messages, (list, tuple)):
            return sum(self.count_message(m) for m in messages) + REPLY_PRIMING
        return self.count_message(cast(Any, messages)) + REPLY_PRIMING  # junk: one odd "message"

    def count_tools(self, tools: Any) -> int:
        """Tool definitions as their compact JSON (OpenAI's hidden rendering is usually a bit
        smaller, so this errs high). 0 for None or empty."""
        if not tools:
            return 0
        text = _as_text(tools)
        return self._cached(text_key(text, "tools"), lambda: self._len(text))

    def cached_count(self, message: Any, key: bytes | None = None) -> int | None:
        """The message's count if it is in the cache (a hit, as for `count_message`), else None.
        Lets the edge tell a warm request from a cold one without encoding anything."""
        if key is None:
            key = message_key(message)
        with self._lock:
            n = self._cache.get(key)
            if n is None:
                return None
            self._cache.move_to_end(key)
            self._hits += 1
            return n

    def uncounted(self, texts: Sequence[str]) -> list[str]:
        """Those of `texts` whose count is neither cached nor under way (no hit is recorded)."""
        found = [text_key(t) if len(t) >= TEXT_CACHE_MIN_CHARS else None for t in texts]
        with self._lock:
            cache, flights = self._cache, self._flights
            return [
                t
                for t, k in zip(texts, found, strict=True)
                if k is not None and k not in cache and k not in flights
            ]

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._cache))

    # counting

    def _len(self, text: str) -> int:
        encoding = self.encoding
        if encoding is None:
            return estimate_tokens(text)
        # `<|endoftext|>` in text is plain text. A long text is counted in pieces whose counts
        # add up to its own (proxy.pieces): never a list of ints for the whole of it.
        if len(text) <= pieces.SIZE or not self._pieces:
            return len(encoding.encode_ordinary(text))
        return sum(len(encoding.encode_ordinary(piece)) for piece in pieces.pieces(text))

    def _count_message(self, message: Any) -> int:
        if not isinstance(message, Mapping):
            return TOKENS_PER_MESSAGE + self._len(_as_text(message))
        n = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            if key == "content":
                n += self._content(value)
            elif key == "tool_calls":
                n += self._tool_calls(value)
            elif key == "function_call":  # legacy single call, shaped like a tool call's function
                n += self._function(value)
            elif key == "name":
                n += self._len(_as_text(value)) + TOKENS_PER_NAME
            else:
                # role, tool_call_id, refusal, reasoning_content, reasoning, and fields we do not
                # know: counted rather than ignored, since undercounting is what overflows a window.
                n += self._len(_as_text(value))
        return n

    def _content(self, content: Any) -> int:
        if isinstance(content, str):
            return self.count_text(content)  # shared with stage 1, which counts the same text
        if not isinstance(content, list):
            return self._len(_as_text(content))
        n = 0
        for part in content:
            if isinstance(part, str):
                n += self._len(part)
                continue
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                n += self._len(part["text"])
            elif kind == "refusal" and isinstance(part.get("refusal"), str):
                n += self._len(part["refusal"])
            elif kind == "image_url":
                n += IMAGE_TOKENS
            elif kind == "input_audio":
                n += AUDIO_TOKENS
            else:
                n += self._len(_as_text(part))
        return n

    def _tool_calls(self, calls: Any) -> int:
        if not isinstance(calls, list):
            return self._len(_as_text(calls))
        n = 0
        for call in calls:
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                n += self._function(call["function"])
            else:
                n += self._len(_as_text(call))
        return n

    def _function(self, function: Any) -> int:
        if not isinstance(function, Mapping):
            return self._len(_as_text(function))
        n = 0
        for key in ("name", "arguments"):
            value = function.get(key)
            if value is not None:
                n += self._len(_as_text(value))  # non-string arguments (malformed, seen): JSON
        return n

    # cache

    def _cached(self, key: Hashable, compute: Callable[[], int]) -> int:
        """The cached count, else computed once: a thread that asks for a count another thread
        is computing waits for it rather than encoding the same text again (the edge counts a
        cold request's long tool results ahead while the pipeline reads them)."""
        with self._lock:
            n = self._cache.get(key)
            if n is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                return n
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = _Flight()
                owner = True
                self._misses += 1
            else:
                owner = False
                self._hits += 1
        if not owner:
            with flight.done:  # held by the owner until its count is in
                pass
            if flight.value is not None:
                return flight.value
            return compute()  # the owner failed (it raised): count here
        try:
            n = flight.value = compute()
            if self._cache_size:
                with self._lock:
                    self._cache[key] = n
                    self._cache.move_to_end(key)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
            return n
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.release()


class ShapedCount(Protocol):
    """A dialect's count of one of its messages (proxy.pipeline.anthropic.count_message)."""

    name: str

    def count_message(
        self, message: Any, length: Callable[[str], int], count_text: Callable[[str], int]
    ) -> int: ...


class ShapedCounter:
    """A TokenCounter's encoding and cache counting another wire format's messages.

    Its messages' keys live in the dialect's own namespace of the shared cache, and so does its
    `name` in the pipeline's memo keys: a Chat message and an Anthropic message with the same
    JSON are different prompts (an `image` block costs its media price here, its JSON there).
    Texts are texts in every format: their counts are shared."""

    def __init__(self, inner: TokenCounter, dialect: ShapedCount) -> None:
        self.inner = inner
        self.dialect = dialect
        self.name = f"{inner.name}/{dialect.name}"
        self.exact = inner.exact
        self.note = inner.note
        self._namespace = dialect.name.encode()

    def __repr__(self) -> str:
        return f"ShapedCounter({self.inner!r}, {self.dialect.name!r})"

    def count_text(self, text: str, key: bytes | None = None) -> int:
        return self.inner.count_text(text, key)

    text_key = staticmethod(text_key)

    def message_key(self, message: Any, text_key: Callable[[str], bytes] = text_key) -> bytes:
        return keys.digest(self._namespace, message_key(message, text_key))

    def count_message(self, message: Any, key: bytes | None = None) -> int:
        if key is None:
            key = self.message_key(message)
        inner = self.inner
        return inner._cached(
            key, lambda: self.dialect.count_message(message, inner._len, inner.count_text)
        )

    def count_messages(self, messages: Sequence[Any]) -> int:
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: Any) -> int:
        return self.inner.count_tools(tools)

    def cached_count(self, message: Any, key: bytes | None = None) -> int | None:
        return self.inner.cached_count(message, key or self.message_key(message))

    def uncounted(self, texts: Sequence[str]) -> list[str]:
        return self.inner.uncounted(texts)

    def cache_info(self) -> CacheInfo:
        return self.inner.cache_info()


class _Flight:
    """A count under way in one thread, for the others that need it. A bare lock, held from
    creation until the count is in: cheaper than an Event for the many counts nobody waits on."""

    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.value: int | None = None
