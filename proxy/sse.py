"""Pure SSE helpers: incremental event framing and the usage tap.

Streams are relayed as raw bytes. Only when a feature needs to see events (learning the true
prompt size from the usage chunk) are chunks framed into events, and then only events that
mention `"usage"` are parsed. Framing never delays an event: each is forwarded the moment its
terminating blank line arrives, which is the earliest a client could use it anyway.
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
    the client did not ask for that extra chunk, so it must never see it.
    """

    def __init__(self, *, strip: bool):
        self.strip = strip
        self.usage: dict[str, Any] | None = None
        self._framer = EventFramer()

    def feed(self, chunk: bytes) -> bytes:
        """Any chunk of the stream: framed here, then `inspect`ed."""
        return self.inspect(self._framer.feed(chunk))

    def inspect(self, block: bytes) -> bytes:
        """A block of whole events (as EventFramer gives them; the relay frames streams itself),
        with the usage-only chunk removed when stripping."""
        if b'"usage"' not in block:
            return block  # the common case: whole events, passed on without a look inside
        out = []
        for e in split_events(block):
            if b'"usage"' in e:
                obj = event_json(e)
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if self.strip and not obj.get("choices"):
                        continue
            out.append(e)
        return b"".join(out)

    def close(self) -> bytes:
        return self._framer.flush()


def json_usage(body: bytes) -> dict[str, Any] | None:
    """`usage` of a non-streamed chat completion body, if it has one."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    return usage if isinstance(usage, dict) else None


def prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    n = usage.get("prompt_tokens") if usage else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None
