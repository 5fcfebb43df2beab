"""Pure SSE helpers: incremental event framing and the usage tap.

Streams are relayed as raw bytes. Only when a feature needs to see events (learning the true
prompt size from the usage chunk) are chunks framed into events, and then only events that
mention `"usage"` are parsed. Framing never delays an event: each is forwarded the moment its
terminating blank line arrives, which is the earliest a client could use it anyway.
"""

from __future__ import annotations

from typing import Any

import orjson

_TERMINATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")


def _next_boundary(buf: bytes, start: int) -> int:
    """End offset (exclusive) of the first complete event at or after `start`, or -1."""
    best = -1
    for t in _TERMINATORS:
        i = buf.find(t, start)
        if i != -1 and (best == -1 or i + len(t) < best):
            best = i + len(t)
    return best


class EventSplitter:
    """Cuts a byte stream into complete SSE events, holding back only an unfinished tail."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        events = []
        start = 0
        while (end := _next_boundary(buf, start)) != -1:
            events.append(buf[start:end])
            start = end
        self._buf = buf[start:]
        return events

    def flush(self) -> bytes:
        rest, self._buf = self._buf, b""
        return rest


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
        self._split = EventSplitter()

    def feed(self, chunk: bytes) -> bytes:
        events = self._split.feed(chunk)
        if not events:
            return b""
        if not any(b'"usage"' in e for e in events):
            return b"".join(events)
        out = []
        for e in events:
            if b'"usage"' in e:
                obj = event_json(e)
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if self.strip and not obj.get("choices"):
                        continue
            out.append(e)
        return b"".join(out)

    def close(self) -> bytes:
        return self._split.flush()


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
