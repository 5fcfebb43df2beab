"""Chat Completions' side of the retrieval loop's JSON answers (proxy.retrieval.loop): which
round continues, and the one completion the client gets. Its stream is proxy.retrieval.stream."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.retrieval.loop import Step
from proxy.retrieval.rounds import Rounds, chat_said, split_calls, upstream_error


def without_ours(choice: dict[str, Any], rounds: Rounds) -> dict[str, Any]:
    """A final choice with the retrieval calls taken out: only the client's calls stay, and a
    choice left with none finishes as `stop` (its text is the answer)."""
    message = choice.get("message")
    ours, theirs = split_calls(message)
    if not ours or not isinstance(message, dict):
        return choice
    rounds.limited = True
    message = {k: v for k, v in message.items() if k != "tool_calls"}
    if theirs:
        message["tool_calls"] = theirs
    elif choice.get("finish_reason") == "tool_calls":
        choice = {**choice, "finish_reason": "stop"}
    return {**choice, "message": message}


def finished(obj: dict[str, Any], first: dict[str, Any], rounds: Rounds) -> dict[str, Any]:
    """The final round's completion as the client gets it: one completion (the first round's
    id, created, model), the text of every round, usage summed, no retrieval call left."""
    same: dict[str, Any] = {k: first[k] for k in ("id", "created", "model") if k in first}
    out = {**obj, **same}
    choices = obj.get("choices")
    if isinstance(choices, list):
        out["choices"] = [without_ours(c, rounds) if isinstance(c, dict) else c for c in choices]
        if rounds.texts and out["choices"] and isinstance(out["choices"][0], dict):
            head = out["choices"][0]
            message = head.get("message")
            if isinstance(message, dict):
                text = "".join([*rounds.texts, message.get("content") or ""])
                out["choices"][0] = {**head, "message": {**message, "content": text}}
    if isinstance(obj.get("usage"), dict):
        out["usage"] = rounds.total_usage(obj["usage"])
    return out


class ChatFold:
    def step(self, obj: dict[str, Any], rounds: Rounds) -> Step | None:
        choices = obj.get("choices")
        head = choices[0] if isinstance(choices, list) and choices else None
        message = head.get("message") if isinstance(head, dict) else None
        ours, _ = split_calls(message)
        if not ours or not rounds.can_continue:
            return None
        assert isinstance(message, dict)
        text = message.get("content") if isinstance(message.get("content"), str) else None
        return Step(ours, [chat_said(text, ours)], text)

    def answer(
        self, obj: dict[str, Any], first: dict[str, Any], rounds: Rounds, data: bytes
    ) -> bytes:
        return orjson.dumps(finished(obj, first, rounds))

    def refusal(self, status: int, body: bytes) -> bytes:
        return orjson.dumps(upstream_error(status, body).body())
