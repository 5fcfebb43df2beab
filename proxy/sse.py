"""Pure SSE helpers: incremental event framing, the usage taps, and usage figures.

Streams are relayed as raw bytes. Only when a feature needs to see events (learning the true
prompt size and the prefix-cache figures from the usage chunk, or from Anthropic's
`message_start` / `message_delta`) are chunks framed into events, and then only events that
mention `"usage"` or `"timings"` (llama.cpp's) are parsed. Framing never delays an event: each
is forwarded the moment its terminating blank line arrives, which is the earliest a client could
use it anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
# A partial event longer than this is passed on unframed: a hostile or broken upstream that
# never sends a blank line must not make the proxy buffer without bound.
MAX_PARTIAL_EVENT = 1 << 18  # 256 KB


class EventFramer:
    """Cuts a byte stream after its last complete SSE event, holding back only the tail.

    Linear in the bytes fed: only the new bytes (and the 3 before them, for a terminator split
    across two chunks) are searched, and the held tail is never re-copied per chunk.
    """

    def __init__(self) -> None:
        self._tail = bytearray()
        self.in_event = False  # the bytes given out so far stop inside an event

    def feed(self, chunk: bytes) -> bytes:
        if not self._tail and chunk.endswith(_EVENT_ENDS):
            # The common case: the upstream wrote whole events and nothing is held back.
            self.in_event = False
            return chunk
        start = max(0, len(self._tail) - 3)
        self._tail += chunk
        cut = max(
            (i + len(end) for end in _EVENT_ENDS if (i := self._tail.rfind(end, start)) != -1),
            default=0,
        )
        if cut == 0 and len(self._tail) > MAX_PARTIAL_EVENT:
            cut = len(self._tail)
        if cut == 0:
            return b""
        out = bytes(self._tail[:cut])
        del self._tail[:cut]
        self.in_event = not out.endswith(_EVENT_ENDS)
        return out

    def flush(self) -> bytes:
        out, self._tail = bytes(self._tail), bytearray()
        return out


def split_events(block: bytes) -> list[bytes]:
    """The events of a block of whole events (as EventFramer gives them), each with its end."""
    events = []
    start = 0
    while start < len(block):
        ends = [(i, len(t)) for t in _EVENT_ENDS if (i := block.find(t, start)) != -1]
        if not ends:
            events.append(block[start:])
            break
        i, n = min(ends)
        events.append(block[start : i + n])
        start = i + n
    return events


# The last event of an OpenAI chat completion stream.
DONE = b"data: [DONE]"
# Anthropic's last event is `event: message_stop` / `data: {"type":"message_stop"}`.
_MESSAGE_STOP = b"message_stop"


def chat_stream_end(block: bytes) -> bool:
    """Whether a block of whole events ends with a chat stream's last event, `data: [DONE]`."""
    return block.rstrip().endswith(DONE)


def anthropic_stream_end(block: bytes) -> bool:
    """Whether a block of whole events ends with an Anthropic stream's `message_stop`."""
    if _MESSAGE_STOP not in block[-256:]:
        return False  # the common case, decided without framing the block
    last = split_events(block.rstrip() + b"\n\n")[-1]
    obj = event_json(last)
    return (isinstance(obj, dict) and obj.get("type") == "message_stop") or any(
        line.startswith(b"event:") and line[6:].strip() == _MESSAGE_STOP
        for line in last.splitlines()
    )


# A Responses stream ends with one of these events (then the server closes it).
_RESPONSE_ENDS = (b"response.completed", b"response.failed", b"response.incomplete")


def responses_stream_end(block: bytes) -> bool:
    """Whether a block of whole events ends with a Responses stream's last event."""
    tail = block[-65536:]
    if not any(end in tail for end in _RESPONSE_ENDS):
        return False  # the common case (a delta), decided without framing the block
    last = split_events(block.rstrip() + b"\n\n")[-1]
    obj = event_json(last)
    kind = obj.get("type") if isinstance(obj, dict) else None
    return isinstance(kind, str) and kind.encode() in _RESPONSE_ENDS


def stream_end_for(shape: str) -> Callable[[bytes], bool]:
    """The last-event test of a stream in the given error shape's API ("anthropic" or chat's)."""
    return anthropic_stream_end if shape == "anthropic" else chat_stream_end


def event_json(event: bytes) -> Any:
    """The JSON payload of a `data:` event, or None when it has none (or it is not JSON)."""
    data = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    if not data:
        return None
    try:
        return orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return None


def _marked(data: bytes) -> bool:
    return b'"usage"' in data or b'"timings"' in data


def _marked_events(block: bytes) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    """Each event of a block of whole events, with its JSON object when it mentions usage or
    timings (None otherwise, and for one that is not a JSON object)."""
    for e in split_events(block):
        obj = event_json(e) if _marked(e) else None
        yield e, obj if isinstance(obj, dict) else None


class StreamTap(Protocol):
    """What the relay needs of a tap: it sees each block of whole events and gives back what to
    send; `usage` and `timings` are read once the stream is over."""

    usage: dict[str, Any] | None
    timings: dict[str, Any] | None

    def inspect(self, block: bytes) -> bytes: ...


class UsageTap:
    """Watches a chat completion stream for its usage; with `strip`, drops the usage-only chunk.

    `strip` is for streams where the proxy itself asked for `stream_options.include_usage`:
    the client did not ask for that extra chunk, so it must never see it. llama.cpp's
    `timings` (its prefix-cache figures, `cache_n`/`prompt_n`) are read on the way, too.
    """

    def __init__(self, *, strip: bool):
        self.strip = strip
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self._framer = EventFramer()

    def feed(self, chunk: bytes) -> bytes:
        """Any chunk of the stream: framed here, then `inspect`ed."""
        return self.inspect(self._framer.feed(chunk))

    def inspect(self, block: bytes) -> bytes:
        """A block of whole events (as EventFramer gives them; the relay frames streams itself),
        with the usage-only chunk removed when stripping."""
        if not _marked(block):
            return block  # the common case: whole events, passed on without a look inside
        out = []
        for e, obj in _marked_events(block):
            if obj is not None:
                if isinstance(obj.get("timings"), dict):
                    self.timings = obj["timings"]
                if isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if self.strip and not obj.get("choices"):
                        continue
            out.append(e)
        return b"".join(out)

    def close(self) -> bytes:
        return self._framer.flush()


class AnthropicUsageTap(UsageTap):
    """Watches an Anthropic Messages stream for its usage; every byte passes through unchanged.

    The usage comes in two parts: `message_start` carries `message.usage` (the input figures,
    `output_tokens` so far), each `message_delta` carries `usage` with the cumulative figures
    it updates (`output_tokens` always; Anthropic's API may repeat `input_tokens` and the cache
    fields). As the SDK's own stream accumulator does, a delta's non-null fields overwrite the
    start's. llama.cpp's `timings` are read too, at the top of an event or of its `message`, in
    case a build sends them here (the pinned one does not: see tests/e2e/test_llamacpp_messages.py).
    """

    def __init__(self) -> None:
        super().__init__(strip=False)  # the client asked for this stream as it is

    def inspect(self, block: bytes) -> bytes:
        if _marked(block):
            for _, obj in _marked_events(block):
                if obj is not None:
                    self._note(obj)
        return block

    def _note(self, obj: dict[str, Any]) -> None:
        message = obj.get("message")
        for holder in (obj, message):
            if isinstance(holder, dict) and isinstance(holder.get("timings"), dict):
                self.timings = holder["timings"]
        if obj.get("type") == "message_start" and isinstance(message, dict):
            usage = message.get("usage")
            if isinstance(usage, dict):
                self.usage = dict(usage)
        elif isinstance(usage := obj.get("usage"), dict):
            merged = dict(self.usage or {})
            merged.update((k, v) for k, v in usage.items() if v is not None)
            self.usage = merged


class ResponsesUsageTap(UsageTap):
    """Watches a Responses stream for its usage; every byte passes through unchanged. The
    usage comes once, in the last event's `response.usage` (`response.completed`, or
    `response.incomplete` / `response.failed` with what was used)."""

    def __init__(self) -> None:
        super().__init__(strip=False)

    def inspect(self, block: bytes) -> bytes:
        if _marked(block):
            for _, obj in _marked_events(block):
                response = obj.get("response") if obj is not None else None
                if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                    self.usage = response["usage"]
                for holder in (obj, response):
                    if isinstance(holder, dict) and isinstance(holder.get("timings"), dict):
                        self.timings = holder["timings"]
        return block


def json_usage(body: bytes) -> dict[str, Any] | None:
    """`usage` of a non-streamed chat completion body, if it has one."""
    return json_report(body)[0]


def json_report(body: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """`usage` and (llama.cpp) `timings` of a non-streamed body: a chat completion, or an
    Anthropic message (its `usage` sits at the top level too)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    usage, timings = obj.get("usage"), obj.get("timings")
    return (
        usage if isinstance(usage, dict) else None,
        timings if isinstance(timings, dict) else None,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# Anthropic's `input_tokens` counts only the prompt tokens after the last cache breakpoint: the
# ones read from and written to the prompt cache are reported beside it, and the prompt is the sum.
ANTHROPIC_CACHE_READ = "cache_read_input_tokens"
ANTHROPIC_CACHE_WRITE = "cache_creation_input_tokens"


def prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    """The whole prompt's size as the backend counted it: a chat usage's `prompt_tokens`, or,
    in a usage without one (Anthropic Messages), `input_tokens` plus the cache reads and writes.
    """
    if not usage:
        return None
    if "prompt_tokens" in usage:
        return _int(usage.get("prompt_tokens"))
    return anthropic_prompt_tokens(usage)


def anthropic_prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    """`input_tokens + cache_read_input_tokens + cache_creation_input_tokens` (absent or null
    cache fields count 0, as llama.cpp sends no `cache_creation_input_tokens`)."""
    n = _int(usage.get("input_tokens")) if usage else None
    if usage is None or n is None:
        return None
    return n + sum(_int(usage.get(k)) or 0 for k in (ANTHROPIC_CACHE_READ, ANTHROPIC_CACHE_WRITE))


def cache_fields(usage: dict[str, Any] | None, timings: dict[str, Any] | None) -> dict[str, int]:
    """What the backend says about its prefix cache, as log fields (none when it says nothing).

    `cached_tokens`: `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM, newer
    llama.cpp), or Anthropic's `cache_read_input_tokens` in a usage without `prompt_tokens`
    (Anthropic's API, llama.cpp's /v1/messages). `cache_n` / `prompt_n`: llama.cpp's `timings`,
    the prompt tokens it reused from its cache and the ones it had to evaluate."""
    out: dict[str, int] = {}
    details = usage.get("prompt_tokens_details") if usage else None
    if details is None and usage:
        details = usage.get("input_tokens_details")  # the Responses API's name
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None and usage and "prompt_tokens" not in usage:
        cached = _int(usage.get(ANTHROPIC_CACHE_READ))
    if cached is not None:
        out["cached_tokens"] = cached
    if timings:
        for key in ("cache_n", "prompt_n"):
            n = _int(timings.get(key))
            if n is not None:
                out[key] = n
    return out


def prefix_reuse(fields: dict[str, int], prompt: int | None) -> tuple[int, int] | None:
    """(prompt tokens, of which served from the prefix cache), from `cache_fields`; None when
    the backend reported no cache figure. llama.cpp's timings count the prompt as
    `cache_n + prompt_n`; otherwise the usage's `prompt_tokens` is the whole."""
    if "cache_n" in fields and "prompt_n" in fields:
        return fields["cache_n"] + fields["prompt_n"], fields["cache_n"]
    if "cached_tokens" in fields and prompt is not None:
        return max(prompt, fields["cached_tokens"]), fields["cached_tokens"]
    return None
