"""The items of a Responses round, for its retrieval loop (proxy.retrieval.responses and
proxy.retrieval.responses_stream): which are our calls and which the client's, what a
continuation appends and what the client is shown, and the answer's usage summed. Pure."""

from __future__ import annotations

from typing import Any

from proxy.retrieval.rounds import Call, Rounds, Shape, as_text
from proxy.retrieval.tool import NAME

# Output items that stand for work the client must do and answer in its next request. One of
# them left in a continuation, unanswered, is refused by the API; shown to the client it is a
# call it will answer. (web_search_call, mcp_call and the like were run by the server: kept.)
CLIENT_CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_approval_request",
    }
)


def result(call: Call, reply: str) -> dict[str, Any]:
    kind = "custom_tool_call_output" if call.kind == "custom" else "function_call_output"
    return {"type": kind, "call_id": call.id, "output": reply}


def items(body: dict[str, Any]) -> list[Any]:
    """The body's `input` as a list: a bare string is one user message, as the API reads it."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


RESPONSES_SHAPE = Shape(
    "responses",
    "input",
    result,
    lambda calls, replies: [result(c, r) for c, r in zip(calls, replies, strict=True)],
    items,
)


def is_ours(item: Any) -> bool:
    return (
        isinstance(item, dict) and item.get("type") == "function_call" and item.get("name") == NAME
    )


def is_client_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in CLIENT_CALLS and not is_ours(item)


# The client's calls a continuation answers NOT_RUN (kept, so that a reasoning item is followed
# by what followed it); other kinds (computer, shell, MCP approval) have outputs of their own
# shapes and are left out, as the model makes them again.
ANSWERED = {"function_call": "function", "custom_tool_call": "custom"}


def answered(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ANSWERED


def call_of(item: dict[str, Any], i: int) -> Call:
    call_id = item.get("call_id") or item.get("id") or f"call_shrink_{i}"
    name = item["name"] if isinstance(item.get("name"), str) else ""
    args = item.get("arguments") if item.get("type") != "custom_tool_call" else item.get("input")
    return Call(str(call_id), name, as_text(args), ANSWERED.get(str(item.get("type")), "function"))


def ours_in(output: list[Any]) -> list[Call]:
    return [call_of(item, i) for i, item in enumerate(output) if is_ours(item)]


def calls_in(output: list[Any]) -> list[Call]:
    """The calls a continuation answers, in order: ours, and the client's `ANSWERED` kinds."""
    return [call_of(item, i) for i, item in enumerate(output) if answered(item)]


def said(output: list[Any]) -> list[Any]:
    """A continued round's output items for the continuation, as produced (reasoning with its
    `encrypted_content`, messages, our calls and the client's function and custom tool calls,
    which are answered NOT_RUN), less the client's calls of other kinds."""
    return [item for item in output if answered(item) or not is_client_call(item)]


def is_call(item: Any) -> bool:
    return is_ours(item) or is_client_call(item)


def shown(output: list[Any]) -> list[Any]:
    """What the client sees of a continued round: its items without any call, nor a reasoning
    item a call followed (the API refuses a reasoning item without its following item, so the
    client's history must not hold one; the continuation has it, with its call)."""
    return [
        item
        for n, item in enumerate(output)
        if not is_call(item)
        and not (
            isinstance(item, dict)
            and item.get("type") == "reasoning"
            and n + 1 < len(output)
            and is_call(output[n + 1])
        )
    ]


def is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


def without_ours(output: list[Any]) -> list[Any]:
    """A round's output as the client gets it when our calls are taken out unserved (the round
    limit): without them, nor a reasoning item that one of them followed, which would be an
    orphan in the client's history."""
    return [
        item
        for n, item in enumerate(output)
        if not is_ours(item)
        and not (is_reasoning(item) and n + 1 < len(output) and is_ours(output[n + 1]))
    ]


def output_text(output: list[Any]) -> str:
    """The SDK's `output_text`: every output_text part of the assistant's messages, joined."""
    return "".join(
        part["text"]
        for item in output
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict)
        and part.get("type") == "output_text"
        and isinstance(part.get("text"), str)
    )


def summed(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last usage with its token figures summed over all rounds: input, output and total
    tokens, the cached input tokens and the reasoning tokens (inside their `*_details`, when
    the last round reports them); other fields as the last round's."""
    if len(usages) == 1:
        return usages[0]
    out = dict(usages[-1])
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        if isinstance(out.get(key), int):
            out[key] = sum(n for u in usages if isinstance(n := u.get(key), int))
    for holder, key in (
        ("input_tokens_details", "cached_tokens"),
        ("output_tokens_details", "reasoning_tokens"),
    ):
        details = out.get(holder)
        if isinstance(details, dict) and isinstance(details.get(key), int):
            total = sum(
                n
                for u in usages
                if isinstance(d := u.get(holder), dict) and isinstance(n := d.get(key), int)
            )
            out[holder] = {**details, key: total}
    return out


def finished(
    obj: dict[str, Any], before: list[Any], rounds: Rounds, first: dict[str, Any]
) -> dict[str, Any]:
    """The last round's response as the client gets it: `before` (the earlier rounds' items
    shown) and its own output without our calls, usage summed, `created_at` the first round's
    (when the client's response began); its id stays the last round's (see the module's doc)."""
    output = obj.get("output")
    output = output if isinstance(output, list) else []
    own = without_ours(output)
    if len(own) < len(output):
        rounds.limited = True
    if not rounds.served and len(own) == len(output):
        return obj
    out = {**obj, "output": [*before, *own]}
    if "created_at" in first:
        out["created_at"] = first["created_at"]
    if isinstance(obj.get("usage"), dict):
        out["usage"] = summed([*rounds.usages, obj["usage"]])
    if isinstance(obj.get("output_text"), str):
        out["output_text"] = output_text(out["output"])
    return out
