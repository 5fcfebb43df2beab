"""A Responses stream continued through retrieval rounds, as one stream to the client.

Streaming stays streaming: text, reasoning and every other item's events go to the client as
they arrive; only the items of calls (`function_call` and the client's other calls, see
`CLIENT_CALLS`) are held, from their `response.output_item.added` to the round's end, since only
then is it known whether the model called `shrink_retrieve`. A round without such a call goes
out as it came: the held events just before its last event, the same bytes wherever no number
had to change. A round that called it and may continue is swallowed from there: our calls, the
client's calls of that round (answered NOT_RUN in the continuation; the model makes them again),
its `response.completed`. The calls are served, the next round opened upstream and its events
forwarded into the same stream: its `response.created` / `in_progress` suppressed, every
`output_index` and `sequence_number` renumbered so that they run on from the last one the client
saw. The last event (`response.completed`, or `failed` / `incomplete`) keeps the first round's
id (the openai SDK refuses a stream whose response id changes) and `created_at`, and holds the
output of every round the client saw, with usage summed over rounds.

A continuation's failure, or an upstream stream that ends without its last event, ends the
stream with the Responses error event, never a hang; a client that leaves cancels the loop
where it is (the relay watches for it) and the upstream response open then is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.errors import ProxyError, responses_sse_error_frame
from proxy.exchange import Exchange
from proxy.relay import Relay
from proxy.retrieval.responses_items import (
    answered,
    call_of,
    calls_in,
    is_client_call,
    is_ours,
    is_reasoning,
    output_text,
    said,
    summed,
)
from proxy.retrieval.round_stream import RoundStream
from proxy.retrieval.round_stream import relay_rounds as relay
from proxy.retrieval.rounds import Call, Rounds
from proxy.sse import event_json, responses_stream_end

STARTS = ("response.created", "response.in_progress", "response.queued")
ENDS = ("response.completed", "response.failed", "response.incomplete")


class StreamCut(ProxyError):
    """The upstream's stream ended before its last event: the client would wait for it."""

    status = 502
    type = "upstream_error"
    code = "upstream_stream_incomplete"


def relay_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Relay:
    """The client's stream: the first round's status and headers, then every round's events."""
    return relay(ex, resp, ResponsesStream(ex, resp, rounds))


@dataclass
class Turn:
    """One round of the upstream stream, by the upstream's output indexes."""

    number: int
    where: dict[int, int] = field(default_factory=dict)  # -> the client's output_index
    held: dict[int, list[tuple[bytes, dict[str, Any]]]] = field(default_factory=dict)
    added: dict[int, Any] = field(default_factory=dict)  # a held item as first announced
    args: dict[int, list[str]] = field(default_factory=dict)  # a held call's argument deltas
    items: dict[int, Any] = field(default_factory=dict)  # each item as done
    done: bool = False  # its last event (or an error event) came
    continuing: bool = False  # it ended in retrieval calls: served, and the stream goes on
    output: list[Any] = field(default_factory=list)  # its output, for the continuation
    ours: list[Call] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    moved: bool = False  # an event's number was changed: the last one must agree
    # A reasoning item held until the next item says what follows it: the API refuses a
    # reasoning item without its following item, so one that a call of a continued round
    # follows is never the client's (its history would hold an orphan).
    reasoning: int | None = None

    def held_item(self, i: int) -> Any:
        """A held item as done, or as announced with the arguments streamed so far."""
        if i in self.items:
            return self.items[i]
        item = self.added.get(i)
        if isinstance(item, dict) and item.get("type") == "function_call":
            return {**item, "arguments": "".join(self.args.get(i, [])) or item.get("arguments")}
        return item


def reframe(e: bytes, obj: dict[str, Any]) -> bytes:
    """`obj` as the event `e` was (an `event:` line when it had one)."""
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    kind = obj.get("type")
    if isinstance(kind, str) and any(line.startswith(b"event:") for line in e.splitlines()):
        return b"event: " + kind.encode() + b"\n" + data
    return data


class ResponsesStream(RoundStream):
    error_frame = staticmethod(responses_sse_error_frame)
    stream_end = staticmethod(responses_stream_end)

    def __init__(self, ex: Exchange, resp: httpx.Response, rounds: Rounds) -> None:
        super().__init__(ex, resp, rounds)
        self.first: dict[str, Any] = {}  # the first round's response, as created
        self.seq: int | None = None  # the next sequence_number the client gets
        self.index = 0  # the next output_index the client gets
        self.shown: dict[int, Any] = {}  # client output_index -> the item (every round's)

    def turn(self, number: int) -> Turn:
        return Turn(number)

    def said(self, turn: Turn) -> tuple[list[Any], str | None]:
        return said(turn.output), None

    def unfinished(self, turn: Turn) -> tuple[bytes, ProxyError | None]:
        """Ended without its last event: what was held goes out (never a call of ours), then
        an error event, since the client would wait for the end."""
        if turn.done:
            return b"", None
        out = self.flush(turn, self.unserved(turn))
        return out, StreamCut(
            "The upstream's stream ended before its last event (response.completed)."
        )

    def emit(
        self,
        e: bytes,
        obj: dict[str, Any],
        turn: Turn,
        index: int | None = None,
        changes: dict[str, Any] | None = None,
    ) -> bytes:
        """The event for the client: its output_index `index` (when it has one), the next
        sequence_number and any other `changes`; the same bytes when nothing changed."""
        changes = dict(changes or {})
        if index is not None and obj.get("output_index") != index:
            changes["output_index"] = index
        seq = obj.get("sequence_number")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if self.seq is None:
                self.seq = seq
            if seq != self.seq:
                changes["sequence_number"] = self.seq
            self.seq += 1
        if not changes:
            return e
        turn.moved = True
        return reframe(e, {**obj, **changes})

    def event(self, e: bytes, turn: Turn) -> bytes:
        """What the client gets of one upstream event (often the event itself)."""
        if turn.done:
            return b""  # past the round's end: nothing more of it is the client's
        obj = event_json(e)
        if not isinstance(obj, dict):
            return e  # a comment or a keep-alive
        kind = obj.get("type")
        if kind == "error":
            turn.done = True  # the upstream's own error: it ends the stream
            return self.emit(e, obj, turn)
        if kind in STARTS:
            if turn.number:
                return b""  # the client's response was created in the first round
            if not self.first and isinstance(obj.get("response"), dict):
                self.first = obj["response"]
            return self.emit(e, obj, turn)
        if kind in ENDS:
            return self.end(e, obj, turn)
        i = obj.get("output_index")
        if not isinstance(i, int) or isinstance(i, bool):
            return self.emit(e, obj, turn)
        released = b""
        if kind == "response.output_item.added" and i not in turn.where and i not in turn.held:
            item = obj.get("item")
            if is_ours(item) or is_client_call(item):
                turn.held[i] = [(e, obj)]
                turn.added[i] = item
                turn.reasoning = None  # held on with the call: it goes, or stays, with it
                return b""
            if turn.reasoning is not None:  # followed by what is not a call: it is the client's
                released = self.flush_only(turn, turn.reasoning)
            if isinstance(item, dict) and item.get("type") == "reasoning":
                turn.held[i] = [(e, obj)]
                turn.added[i] = item
                turn.reasoning = i
                return released
            turn.where[i] = self.index
            self.index += 1
        if kind == "response.output_item.done":
            turn.items[i] = obj.get("item")
        if i in turn.held:
            turn.held[i].append((e, obj))
            if kind == "response.function_call_arguments.delta" and isinstance(
                obj.get("delta"), str
            ):
                turn.args.setdefault(i, []).append(obj["delta"])
            return b""
        if kind == "response.output_item.done" and i in turn.where:
            self.shown[turn.where[i]] = obj.get("item")
        return released + self.emit(e, obj, turn, turn.where.get(i))

    def flush_only(self, turn: Turn, i: int) -> bytes:
        """One held item's events (a reasoning item the client may have), given the next
        index."""
        turn.reasoning = None
        events = turn.held.pop(i, [])
        turn.where[i] = self.index
        self.index += 1
        if i in turn.items:
            self.shown[turn.where[i]] = turn.items[i]
        return b"".join(self.emit(e, obj, turn, turn.where[i]) for e, obj in events)

    def unserved(self, turn: Turn) -> set[int]:
        """The held items that never reach the client: our calls, and a reasoning item one of
        them followed (an orphan in the client's history without it)."""
        ours = {i for i in turn.held if is_ours(turn.held_item(i))}
        held = turn.held
        return ours | {i for i in held if i + 1 in ours and is_reasoning(turn.held_item(i))}

    def flush(self, turn: Turn, drop: set[int]) -> bytes:
        """The held items' events, but those in `drop`, each item given the next index."""
        out = []
        for i in sorted(set(turn.held) - drop):
            turn.where[i] = self.index
            self.index += 1
            if i in turn.items:
                self.shown[turn.where[i]] = turn.items[i]
            out += [self.emit(e, obj, turn, turn.where[i]) for e, obj in turn.held[i]]
        turn.held.clear()
        turn.reasoning = None
        return b"".join(out)

    def end(self, e: bytes, obj: dict[str, Any], turn: Turn) -> bytes:
        """The round's last event: the round continues (nothing of this is sent), or the
        client's stream ends here with what was held and the whole response."""
        turn.done = True
        response = obj.get("response")
        response = response if isinstance(response, dict) else {}
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else None
        if not turn.number:
            self.first_usage = usage
        output = response.get("output")
        if not isinstance(output, list) or not output:
            output = [turn.items[i] for i in sorted(turn.items)]
        ours = {i for i in turn.held if is_ours(turn.held_item(i))}
        if ours and obj.get("type") == "response.completed" and self.rounds.can_continue:
            turn.continuing = True
            turn.output = output
            held = [i for i in sorted(turn.held) if answered(turn.held_item(i))]
            turn.ours = calls_in(output) or [call_of(turn.held_item(i), i) for i in held]
            turn.usage = usage
            self.keep_shown(turn, output)
            return b""
        out = self.flush(turn, self.unserved(turn))
        if ours:
            self.rounds.limited = True
        self.keep_shown(turn, output)
        if not (turn.number or ours or turn.moved) or not response:
            return out + self.emit(e, obj, turn)
        whole: dict[str, Any] = {**response, "output": [self.shown[k] for k in sorted(self.shown)]}
        for key in ("id", "created_at"):
            if key in self.first:
                whole[key] = self.first[key]
        if usage is not None and self.rounds.usages:
            whole["usage"] = summed([*self.rounds.usages, usage])
        if isinstance(whole.get("output_text"), str):
            whole["output_text"] = output_text(whole["output"])
        return out + self.emit(e, obj, turn, changes={"response": whole})

    def keep_shown(self, turn: Turn, output: list[Any]) -> None:
        """The round's items the client saw, as its response lists them (by upstream index)."""
        for i, k in turn.where.items():
            if i < len(output) and isinstance(output[i], dict):
                self.shown[k] = output[i]
            elif i in turn.items:
                self.shown[k] = turn.items[i]
