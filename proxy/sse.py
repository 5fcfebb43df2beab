"""Pure SSE helpers: incremental event framing and the usage tap.

Streams are relayed as raw bytes. Only when a feature needs to see events (learning the true
prompt size and the prefix-cache figures from the usage chunk) are chunks framed into events,
and then only events that mention `"usage"` or `"timings"` (llama.cpp's) are parsed. Framing
never delays an event: each is forwarded the moment its terminating blank line arrives, which is
the earliest a client could use it anyway.
"""

from __future__ import annotations

from typing import Any

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


def event_json(event: bytes) -> Any:
    """The JSON payload of a `data:` event, or None when it has none (or it is not JSON)."""
    data = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    if not data:
        return None
    try:
        return orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return None


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
        if b'"usage"' not in block and b'"timings"' not in block:
            return block  # the common case: whole events, passed on without a look inside
        out = []
        for e in split_events(block):
            if b'"usage"' in e or b'"timings"' in e:
                obj = event_json(e)
                if isinstance(obj, dict):
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


def json_usage(body: bytes) -> dict[str, Any] | None:
    """`usage` of a non-streamed chat completion body, if it has one."""
    return json_report(body)[0]


def json_report(body: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """`usage` and (llama.cpp) `timings` of a non-streamed chat completion body."""
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


def prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    return _int(usage.get("prompt_tokens")) if usage else None


def cache_fields(usage: dict[str, Any] | None, timings: dict[str, Any] | None) -> dict[str, int]:
    """What the backend says about its prefix cache, as log fields (none when it says nothing).

    `cached_tokens`: `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM, newer
    llama.cpp). `cache_n` / `prompt_n`: llama.cpp's `timings`, the prompt tokens it reused from
    its cache and the ones it had to evaluate."""
    out: dict[str, int] = {}
    details = usage.get("prompt_tokens_details") if usage else None
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
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
