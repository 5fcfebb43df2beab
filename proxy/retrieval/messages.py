"""The in-flight retrieval loop of an Anthropic Messages request (`/v1/messages`): when the
model calls `shrink_retrieve`, the proxy answers from the store and continues the generation
upstream, at most `retrieve_rounds` times; the client sees one message and never the call.

A continuation is the body as sent plus, per round served, the round's assistant message echoed
whole, as the API wants it with thinking (its content blocks as the model produced them:
thinking with its signature, redacted_thinking, text, every tool_use block) and ONE user message
holding a `tool_result` block per tool_use (`MESSAGES_SHAPE`): a page for ours, for a call of
the client's `NOT_RUN` (the proxy cannot run it; the model makes it again).

The client's answer joins the rounds: the first round's `id` and `model`; `content` is every
continued round's blocks less its tool_use blocks (ours, and the client's the model re-issues),
then the final round's blocks less ours; `stop_reason` `tool_use` becomes `end_turn` when none
of the client's tool_use is left; `usage` summed over every upstream response (`summed_usage`).
This module holds those pure pieces; proxy.retrieval.messages_loop is the non-stream loop,
proxy.retrieval.messages_stream the stream's.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import ProxyError
from proxy.retrieval.rounds import Call, Rounds, Shape, upstream_error
from proxy.retrieval.tool import NAME

# The usage figures summed over rounds (Anthropic's `input_tokens` excludes the cache reads and
# writes beside it, so each is summed on its own), and the nested counters summed likewise.
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
NESTED_USAGE = ("cache_creation", "server_tool_use")


def result_block(call: Call, reply: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call.id, "content": reply}


MESSAGES_SHAPE = Shape(
    "anthropic",
    "messages",
    # One answer alone, as a page's fit is counted: a user message of its one block.
    lambda call, reply: {"role": "user", "content": [result_block(call, reply)]},
    lambda calls, replies: [
        {
            "role": "user",
            "content": [result_block(c, r) for c, r in zip(calls, replies, strict=True)],
        }
    ],
)


def is_use(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def is_ours(block: Any) -> bool:
    return is_use(block) and block.get("name") == NAME


def call_of(block: dict[str, Any], n: int, arguments: str | None = None) -> Call:
    """A tool_use block as a Call (`arguments`: its raw input JSON, from a stream)."""
    ident = block.get("id")
    ident = ident if isinstance(ident, str) and ident else f"toolu_shrink_{n}"
    if arguments is None:  # Messages' input is JSON itself, never a JSON string as chat's
        arguments = orjson.dumps(block.get("input", {})).decode()
    name = block.get("name")
    return Call(ident, name if isinstance(name, str) else "", arguments)


def said(blocks: list[Any], calls: list[Call]) -> dict[str, Any]:
    """The assistant message of a round served: its blocks as produced, less empty text blocks
    (which the API refuses); each tool_use block (`calls`, in order) carries the id its result
    answers."""
    ids = iter(calls)
    content = []
    for block in blocks:
        if is_use(block):
            call = next(ids)
            content.append(block if block.get("id") == call.id else {**block, "id": call.id})
        elif not (
            isinstance(block, dict) and block.get("type") == "text" and block.get("text") == ""
        ):
            content.append(block)
    return {"role": "assistant", "content": content}


def summed_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last round's usage with the token figures (`USAGE_KEYS`, and the integers inside
    `NESTED_USAGE`) summed over every round that reported them; other fields as the last's."""
    if len(usages) == 1:
        return usages[0]
    out = dict(usages[-1])
    for key in USAGE_KEYS:
        figures = [n for u in usages if isinstance(n := u.get(key), int)]
        if figures:
            out[key] = sum(figures)
    for key in NESTED_USAGE:
        if isinstance(out.get(key), dict):
            out[key] = {
                k: sum(
                    n
                    for u in usages
                    if isinstance(d := u.get(key), dict) and isinstance(n := d.get(k), int)
                )
                if isinstance(v, int)
                else v
                for k, v in out[key].items()
            }
    return out


def anthropic_error(status: int, body: bytes) -> ProxyError:
    """A continuation's refusal as a ProxyError whose Anthropic body keeps the upstream's own
    message, and its error type when it sent Anthropic's shape (else the type of its status)."""
    exc = upstream_error(status, body)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) and obj.get("type") == "error" else None
    if isinstance(err, dict) and isinstance(err.get("type"), str):
        exc.anthropic_type = err["type"]
    return exc


def final_blocks(content: list[Any], stop: Any, rounds: Rounds) -> tuple[list[Any], Any, bool]:
    """(the final round's blocks less ours, its stop_reason, whether that changed): a round
    whose retrieval calls were not served (the limit) ends `end_turn` when no call is left."""
    if not any(is_ours(b) for b in content):
        return content, stop, False
    rounds.limited = True
    kept = [b for b in content if not is_ours(b)]
    if stop == "tool_use" and not any(is_use(b) for b in kept):
        stop = "end_turn"
    return kept, stop, True


def finished(
    obj: dict[str, Any], first: dict[str, Any], earlier: list[Any], rounds: Rounds
) -> dict[str, Any]:
    """The final round's message as the client gets it (see the module's docstring)."""
    same: dict[str, Any] = {k: first[k] for k in ("id", "model") if k in first}
    out = {**obj, **same}
    content = obj.get("content")
    if isinstance(content, list):
        kept, stop, changed = final_blocks(content, obj.get("stop_reason"), rounds)
        out["content"] = [*earlier, *kept]
        if changed:
            out["stop_reason"] = stop
    if rounds.usages and isinstance(obj.get("usage"), dict):
        out["usage"] = summed_usage([*rounds.usages, obj["usage"]])
    return out


def continues(content: Any, stop: Any, rounds: Rounds) -> bool:
    """Whether a round's calls are served: it called our tool, the limit allows another round,
    and it was not cut short by `max_tokens` (its last call's input may be incomplete)."""
    return (
        isinstance(content, list)
        and any(is_ours(b) for b in content)
        and rounds.can_continue
        and stop != "max_tokens"
    )
