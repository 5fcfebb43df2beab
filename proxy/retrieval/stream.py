"""A chat stream continued through retrieval rounds, as one stream to the client.

Streaming stays streaming: content (and reasoning) deltas go to the client as they arrive; only
tool-call deltas are held, until their choice's finish chunk says whether the model called
`shrink_retrieve`. Without such a call the held deltas go out as they came (same order, the
same bytes in the first round), then the finish, the usage and `[DONE]`. With one, the round's
finish, usage and `[DONE]` are swallowed, the calls served, the next round opened upstream and
its events forwarded into the same stream: its role-only first delta suppressed, its `id`,
`created` and `model` the first round's, so the client sees one completion; its usage chunk
carries the sums over rounds. A continuation's failure ends the stream with an in-band error
event (the relay's), never a hang; a client that leaves cancels the loop where it is (the relay
watches for it) and the upstream response open then is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.errors import ProxyError, sse_error_frame
from proxy.exchange import Exchange
from proxy.relay import Relay
from proxy.retrieval.round_stream import RoundStream
from proxy.retrieval.round_stream import relay_rounds as relay
from proxy.retrieval.rounds import Call, Rounds, chat_said
from proxy.retrieval.tool import NAME
from proxy.sse import DONE, chat_stream_end, event_json

ID_FIELDS = ("id", "created", "model")


def relay_rounds(ex: Exchange, resp: httpx.Response, rounds: Rounds) -> Relay:
    """The client's stream: the first round's status and headers, then every round's events."""
    return relay(ex, resp, ChatStream(ex, resp, rounds))


@dataclass
class Held:
    """One choice's tool-call deltas of a round, held until its finish chunk."""

    # (the event as sent, when it held nothing else; the chunk; the choice; its deltas)
    events: list[tuple[bytes | None, dict[str, Any], dict[str, Any], list[Any]]] = field(
        default_factory=list
    )
    parts: dict[int, list[Any]] = field(default_factory=dict)  # index -> [id, name, args...]

    def add(
        self, raw: bytes | None, obj: dict[str, Any], choice: dict[str, Any], deltas: list[Any]
    ) -> None:
        self.events.append((raw, obj, choice, deltas))
        for d in deltas:
            if not isinstance(d, dict):
                continue
            part = self.parts.setdefault(index_of(d), [None, None])
            fn = d.get("function")
            fn = fn if isinstance(fn, dict) else {}
            if isinstance(d.get("id"), str) and part[0] is None:
                part[0] = d["id"]
            if isinstance(fn.get("name"), str) and part[1] is None:
                part[1] = fn["name"]
            if isinstance(fn.get("arguments"), str):
                part.append(fn["arguments"])

    def calls(self) -> dict[int, Call]:
        return {
            i: Call(p[0] or f"call_shrink_{i}", p[1] or "", "".join(p[2:]))
            for i, p in self.parts.items()
        }

    def flush(self, drop: set[int], ids: dict[str, Any] | None) -> bytes:
        """The held deltas as events, without the calls in `drop` (the others renumbered from
        0, in order); as sent when nothing is dropped or rewritten (`ids`: a later round's)."""
        order = {i: n for n, i in enumerate(sorted(set(self.parts) - drop))}
        out = []
        for raw, obj, choice, deltas in self.events:
            if raw is not None and not drop and ids is None:
                out.append(raw)
                continue
            kept = [
                {**d, "index": order[index_of(d)]}
                for d in deltas
                if isinstance(d, dict) and index_of(d) not in drop
            ]
            if kept:
                one = {**choice, "delta": {"tool_calls": kept}, "finish_reason": None}
                out.append(frame({**obj, **(ids or {}), "choices": [one]}))
        return b"".join(out)


def index_of(delta: dict[str, Any]) -> int:
    i = delta.get("index", 0)
    return i if isinstance(i, int) else 0


@dataclass
class Turn:
    """One round of the upstream stream."""

    number: int
    held: dict[int, Held] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)  # choice 0's content
    ours: list[Call] = field(default_factory=list)  # the retrieval calls to serve
    continuing: bool = False  # the round ended in retrieval calls: nothing more of it is sent
    done: bool = False
    usage: dict[str, Any] | None = None


def frame(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def said(choice: dict[str, Any]) -> bool:
    """Whether an edited choice still tells the client something (a delta value, a finish,
    logprobs): a later round's first delta, once its role is taken out, does not."""
    delta = choice.get("delta")
    return (
        choice.get("finish_reason") is not None
        or choice.get("logprobs") is not None
        or (isinstance(delta, dict) and any(v not in (None, "") for v in delta.values()))
    )


class ChatStream(RoundStream):
    error_frame = staticmethod(sse_error_frame)
    stream_end = staticmethod(chat_stream_end)

    def __init__(self, ex: Exchange, resp: httpx.Response, rounds: Rounds) -> None:
        super().__init__(ex, resp, rounds)
        self.first: dict[str, Any] = {}  # id, created, model of the first round

    def turn(self, number: int) -> Turn:
        return Turn(number)

    def said(self, turn: Turn) -> tuple[list[Any], str | None]:
        text = "".join(turn.text)
        return [chat_said(text, turn.ours)], text

    def unfinished(self, turn: Turn) -> tuple[bytes, ProxyError | None]:
        """Ended without a finish: what was held goes out, never a call of ours."""
        if turn.continuing:
            return b"", None
        ids = self.ids(turn)
        out = b""
        for held in turn.held.values():
            drop = {i for i, c in held.calls().items() if c.name == NAME}
            out += held.flush(drop, ids)
        turn.held.clear()
        return out, None

    def ids(self, turn: Turn) -> dict[str, Any] | None:
        return self.first if turn.number else None

    def event(self, e: bytes, turn: Turn) -> bytes:
        """What the client gets of one upstream event (often the event itself)."""
        if e.strip() == DONE:
            turn.done = True
            return b"" if turn.continuing else e
        obj = event_json(e)
        if not isinstance(obj, dict) or "error" in obj:
            return b"" if turn.continuing else e  # a comment, or the upstream's own error
        if not turn.number:
            if not self.first:
                self.first = {k: obj[k] for k in ID_FIELDS if k in obj}
            if isinstance(obj.get("timings"), dict):
                self.timings = obj["timings"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            turn.usage = usage
            if not turn.number:
                self.first_usage = usage
        if turn.continuing:
            return b""
        choices = obj.get("choices")
        changed = bool(turn.number)
        before = b""
        kept: list[Any] = []
        choices = choices if isinstance(choices, list) else []
        for c in choices:
            if not isinstance(c, dict):
                kept.append(c)
                continue
            c, held, edited = self.choice(e, obj, c, turn, len(choices))
            before += held
            changed = changed or edited
            if not edited or said(c):
                kept.append(c)
        if turn.continuing:  # this chunk ended the round in our calls: only its text goes on
            obj = {k: v for k, v in obj.items() if k != "usage"}
            usage = None
            if not kept:
                return before
        if isinstance(usage, dict) and self.rounds.usages:
            obj = {**obj, "usage": self.rounds.total_usage(usage)}
            changed = True
        if not kept and (choices or (isinstance(usage, dict) and self.rounds.strip_usage)):
            # Nothing the client needs (a held delta, a role repeated), or the usage-only
            # chunk the proxy asked for itself.
            return before
        if not changed:
            return before + e
        return before + frame({**obj, **(self.ids(turn) or {}), "choices": kept})

    def choice(
        self, e: bytes, obj: dict[str, Any], c: dict[str, Any], turn: Turn, siblings: int
    ) -> tuple[dict[str, Any], bytes, bool]:
        """(the choice as forwarded, held events that go out before it, whether it changed)."""
        i = index_of(c)
        delta = c.get("delta")
        changed = False
        if isinstance(delta, dict):
            deltas = delta.get("tool_calls")
            if isinstance(deltas, list) and deltas:
                rest = {k: v for k, v in delta.items() if k != "tool_calls"}
                alone = (
                    siblings == 1
                    and c.get("finish_reason") is None
                    and all(v is None for v in rest.values())
                )
                turn.held.setdefault(i, Held()).add(e if alone else None, obj, c, deltas)
                delta, changed = rest, True
            if turn.number and "role" in delta:
                delta = {k: v for k, v in delta.items() if k != "role"}
                changed = True
            if i == 0 and isinstance(delta.get("content"), str):
                turn.text.append(delta["content"])
            if changed:
                c = {**c, "delta": delta}
        finish = c.get("finish_reason")
        if finish is None:
            return c, b"", changed
        held = turn.held.pop(i, None)
        calls = held.calls() if held is not None else {}
        ours = {n for n, call in calls.items() if call.name == NAME}
        if ours and i == 0 and self.rounds.can_continue:
            turn.continuing = True
            turn.ours = [calls[n] for n in sorted(ours)]
            return {**c, "finish_reason": None}, b"", True
        out = held.flush(ours, self.ids(turn)) if held is not None else b""
        if ours:
            self.rounds.limited = True
            if len(ours) == len(calls) and finish == "tool_calls":
                return {**c, "finish_reason": "stop"}, out, True
        return c, out, changed
