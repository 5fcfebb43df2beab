"""An Anthropic Messages stream continued through retrieval rounds, as one stream to the client.

Streaming stays streaming: text and thinking blocks go to the client as they arrive. From a
round's first `tool_use` block on, its events are held (every one, pings too, so a round that
ends without a retrieval call goes out byte for byte, in order) until the round's
`message_delta` says how it ended. Then:

- no call of ours, or the round cannot continue (the limit; `max_tokens`): the held events go
  out, less our tool_use blocks (the blocks after them renumbered); `stop_reason` `tool_use`
  becomes `end_turn` when none of the client's calls is left; the `message_delta` carries usage
  summed over rounds (as the SDK reads it: each figure a total that overwrites the start's).
- ours, and the round can continue: its tool_use blocks (ours and the client's, which the model
  makes again) are swallowed, held text blocks after them still go out; the round's
  `message_delta` and `message_stop` are swallowed; the assistant turn is rebuilt from the deltas
  (thinking with its signature) for the continuation, the next round opened upstream, its
  `message_start` suppressed and its block `index`es renumbered to follow what the client saw.

A continuation's failure ends the stream with an Anthropic `event: error` (the relay's); a
client that leaves cancels the loop where it is (the relay watches) and the upstream response
open then is closed. A round whose stream ends without its `message_delta` gives out what it
held, never a call of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.errors import ProxyError, anthropic_sse_error_frame
from proxy.exchange import Exchange
from proxy.relay import Relay
from proxy.retrieval.messages import (
    USAGE_KEYS,
    anthropic_error,
    call_of,
    is_ours,
    said,
    summed_usage,
)
from proxy.retrieval.round_stream import RoundStream
from proxy.retrieval.round_stream import relay_rounds as relay
from proxy.retrieval.rounds import Call, Rounds
from proxy.sse import anthropic_stream_end, event_json


def relay_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Relay:
    """The client's stream: the first round's status and headers, then every round's events."""
    return relay(ex, resp, MessagesStream(ex, resp, rounds))


@dataclass
class Block:
    """One content block of a round, rebuilt from its start and deltas as the SDK does."""

    value: dict[str, Any]
    json: list[str] = field(default_factory=list)  # a tool_use's input_json_delta pieces

    def add(self, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        v, kind = self.value, delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            v["text"] = str(v.get("text") or "") + delta["text"]
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            v["thinking"] = str(v.get("thinking") or "") + delta["thinking"]
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            v["signature"] = delta["signature"]  # whole, once (the SDK assigns it too)
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.json.append(delta["partial_json"])
        elif kind == "citations_delta" and "citation" in delta:
            v["citations"] = [*(v.get("citations") or []), delta["citation"]]

    def built(self) -> dict[str, Any]:
        """The block as the continuation sends it: a tool_use's input parsed (an input that is
        not JSON goes as `{}`; its call is answered with the reason from the raw text)."""
        if not self.json:
            return self.value
        try:
            value = orjson.loads("".join(self.json))
        except orjson.JSONDecodeError:
            value = {}
        return {**self.value, "input": value}

    def arguments(self) -> str | None:
        return "".join(self.json) or None


@dataclass
class Turn:
    """One round of the upstream stream."""

    number: int
    blocks: dict[int, Block] = field(default_factory=dict)  # upstream index -> block
    shown: dict[int, int] = field(default_factory=dict)  # upstream index -> the client's
    held: list[tuple[bytes, Any]] = field(default_factory=list)  # (event, its JSON)
    usage: dict[str, Any] = field(default_factory=dict)  # message_start's, deltas merged in
    ours: list[Call] = field(default_factory=list)  # the retrieval calls to serve
    failed: bool = False  # an `error` event came: the round is not continued
    continuing: bool = False  # the round ended in retrieval calls: nothing more of it is sent
    done: bool = False

    def merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage.update((k, v) for k, v in usage.items() if v is not None)

    def calls(self, indexes: list[int]) -> dict[int, Call]:
        return {i: call_of(self.blocks[i].value, i, self.blocks[i].arguments()) for i in indexes}


def frame(obj: dict[str, Any]) -> bytes:
    kind = obj.get("type")
    name = kind.encode() if isinstance(kind, str) else b"message"
    return b"event: " + name + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def index_of(obj: dict[str, Any]) -> int | None:
    i = obj.get("index")
    return i if isinstance(i, int) and not isinstance(i, bool) else None


class MessagesStream(RoundStream):
    error_frame = staticmethod(anthropic_sse_error_frame)
    stream_end = staticmethod(anthropic_stream_end)

    def __init__(self, ex: Exchange, resp: httpx.Response, rounds: Rounds) -> None:
        super().__init__(ex, resp, rounds)
        self.next_index = 0  # content blocks the client has been given

    def turn(self, number: int) -> Turn:
        return Turn(number)

    def usage(self, turn: Turn) -> dict[str, Any]:
        return dict(turn.usage)

    def said(self, turn: Turn) -> tuple[list[Any], str | None]:
        blocks = [turn.blocks[i].built() for i in sorted(turn.blocks)]
        return [said(blocks, turn.ours)], None

    def refusal(self, status: int, body: bytes) -> ProxyError:
        return anthropic_error(status, body)

    def unfinished(self, turn: Turn) -> tuple[bytes, ProxyError | None]:
        """Ended without its message_delta: what was held goes out, never a call of ours."""
        if turn.continuing or not turn.held:
            return b"", None
        return self.release(turn, self.ours_in(turn)), None

    def event(self, e: bytes, turn: Turn) -> bytes:
        """What the client gets of one upstream event (often the event itself)."""
        obj = event_json(e)
        kind = obj.get("type") if isinstance(obj, dict) else None
        if turn.continuing:  # past the round's end: only its message_stop is left
            turn.done = kind == "message_stop"
            return b""
        if not isinstance(obj, dict):
            return self.hold(e, obj, turn) if turn.held else e  # a comment, or junk
        if kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict):
                turn.merge_usage(message.get("usage"))
                if not turn.number and isinstance(message.get("timings"), dict):
                    self.timings = message["timings"]
            if not turn.number:
                self.first_usage = turn.usage  # merged with the round's deltas as they come
            return b"" if turn.number else e  # the client's message is the first round's
        if kind == "message_delta":
            turn.merge_usage(obj.get("usage"))
            return self.end(e, obj, turn)
        if kind == "error":
            turn.failed = True
            return self.release(turn, self.ours_in(turn)) + e
        if kind == "message_stop":  # without a message_delta before it: nothing is served
            turn.done = True
            return self.release(turn, self.ours_in(turn)) + e
        i = index_of(obj)
        if kind == "content_block_start" and i is not None:
            start = obj.get("content_block")
            turn.blocks[i] = Block(dict(start) if isinstance(start, dict) else {})
            if turn.held or (isinstance(start, dict) and start.get("type") == "tool_use"):
                return self.hold(e, obj, turn)
        elif kind == "content_block_delta" and i is not None and i in turn.blocks:
            turn.blocks[i].add(obj.get("delta"))
        if turn.held:
            return self.hold(e, obj, turn)
        return self.shown(e, obj, turn, kind)

    def hold(self, e: bytes, obj: Any, turn: Turn) -> bytes:
        turn.held.append((e, obj))
        return b""

    def shown(self, e: bytes, obj: dict[str, Any], turn: Turn, kind: Any) -> bytes:
        """An event given to the client now, its block renumbered to follow what it saw."""
        i = index_of(obj)
        if i is None:
            return e
        if kind == "content_block_start" and i not in turn.shown:
            turn.shown[i] = self.next_index
            self.next_index += 1
        n = turn.shown.get(i, i)
        return e if n == i else frame({**obj, "index": n})

    def ours_in(self, turn: Turn) -> list[int]:
        return sorted(i for i, b in turn.blocks.items() if is_ours(b.value))

    def release(self, turn: Turn, drop: list[int]) -> bytes:
        """The held events, less those of the blocks in `drop`, renumbered."""
        out = []
        for e, obj in turn.held:
            if isinstance(obj, dict) and index_of(obj) in drop:
                continue
            out.append(self.shown(e, obj, turn, obj.get("type")) if isinstance(obj, dict) else e)
        turn.held.clear()
        return b"".join(out)

    def end(self, e: bytes, obj: dict[str, Any], turn: Turn) -> bytes:
        """The round's message_delta: continue, or the held events and the client's end."""
        delta = obj.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        stop = delta.get("stop_reason")
        ours = self.ours_in(turn)
        uses = [i for i, b in turn.blocks.items() if b.value.get("type") == "tool_use"]
        rounds = self.rounds
        if ours and rounds.can_continue and stop != "max_tokens" and not turn.failed:
            turn.continuing = True
            turn.ours = list(turn.calls(sorted(uses)).values())  # theirs answered NOT_RUN
            return self.release(turn, uses)
        out = self.release(turn, ours)
        changed = False
        if ours:
            rounds.limited = True
            if stop == "tool_use" and len(uses) == len(ours):
                delta, changed = {**delta, "stop_reason": "end_turn"}, True
        usage = obj.get("usage")
        if rounds.usages:
            # Totals over rounds: the SDK overwrites message_start's figures with a delta's.
            total = summed_usage([*rounds.usages, turn.usage])
            keys = dict.fromkeys([*(usage if isinstance(usage, dict) else {}), *USAGE_KEYS])
            usage = {k: total[k] for k in keys if k in total}
            changed = True
        if not changed:
            return out + e
        return out + frame({**obj, "delta": delta, "usage": usage})
