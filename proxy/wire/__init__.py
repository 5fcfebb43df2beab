"""OpenAI wire format: parse and validate just enough of a chat request, never drop a field.

The request stays a plain dict parsed by orjson; only `messages` is read (and replaced when the
pipeline changed it). Everything else the client sent, known to us or not, is forwarded as-is.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import InvalidRequest

# orjson refuses nesting deeper than 1024 levels on its own; we stop earlier with a clearer error.
MAX_DEPTH = 256
_CONTAINERS = (dict, list)


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise InvalidRequest("The request body is empty; expected a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        text = str(exc)
        if "recursion" in text.lower():
            raise InvalidRequest(
                f"The request body is nested deeper than {MAX_DEPTH} levels."
            ) from None
        raise InvalidRequest(f"The request body is not valid JSON: {text}") from None


def _depth_ok(value: Any, limit: int) -> bool:
    """Iterative depth check: a recursive walk of hostile JSON would be the thing that overflows.

    Runs on every request, so strings and numbers (nearly everything) cost one isinstance each.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    push, pop = stack.append, stack.pop
    while stack:
        v, d = pop()
        if d > limit:
            return False
        for x in v.values() if isinstance(v, dict) else v:
            if isinstance(x, _CONTAINERS):  # a tuple: `dict | list` builds a new union per call
                push((x, d + 1))
    return True


def parse_chat(raw: bytes) -> dict[str, Any]:
    """The body of a chat completion request, or `InvalidRequest` (400) saying what is wrong."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' is required and must be an array.", param="messages")
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message.", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequest(f"messages[{i}] must be an object.", param=f"messages.[{i}]")
        if not isinstance(m.get("role"), str):
            raise InvalidRequest(
                f"messages[{i}].role is required and must be a string.",
                param=f"messages.[{i}].role",
            )
    if not _depth_ok(messages, MAX_DEPTH):
        raise InvalidRequest(f"'messages' is nested deeper than {MAX_DEPTH} levels.")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("'model' must be a string.", param="model")
    return body


def requested_completion_tokens(
    body: dict[str, Any], keys: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
) -> int | None:
    """The client's own cap on the answer (the first of `keys` set), if it makes sense."""
    for key in keys:
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def is_stream(body: dict[str, Any]) -> bool:
    return body.get("stream") is True


def wants_stream_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def with_stream_usage(body: dict[str, Any]) -> dict[str, Any]:
    """The request asking for the final usage chunk, other stream options kept."""
    opts = body.get("stream_options")
    merged = {**opts, "include_usage": True} if isinstance(opts, dict) else {"include_usage": True}
    return {**body, "stream_options": merged}


def splice_stream_usage(raw: bytes, body: dict[str, Any]) -> bytes | None:
    """`raw` asking for the usage chunk, by inserting the option as the object's first member
    (the client's bytes otherwise untouched; a large body is not serialised again), or None
    when the body already has `stream_options` (a second key would be ambiguous)."""
    if "stream_options" in body:
        return None
    start = raw.find(b"{")
    if start < 0 or raw[:start].strip():
        return None
    return raw[: start + 1] + b'"stream_options":{"include_usage":true},' + raw[start + 1 :]
