"""Anthropic Messages wire format: parse just enough of a `/v1/messages` request.

`messages` is what the engine plans (proxy.pipeline.anthropic); `system` and `tools` are
counted as fixed tokens and forwarded as sent. One exception, and only when the upstream is
not Anthropic's own API: Claude Code opens `system` with a billing line whose value (its
`cch=<hex>`, and a suffix of `cc_version`) changes on every request, so no other backend's
prefix cache ever matches past it; the value is removed (`normalise_billing`).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.errors import InvalidRequest
from proxy.wire import MAX_DEPTH, _depth_ok, parse_json

BILLING = b"x-anthropic-billing-header:"
# Where to look for it: Claude Code puts it first in system[0]; a body is not scanned whole.
BILLING_WINDOW = 64 * 1024
# `cc_version=2.1.37.3a3; cc_entrypoint=cli; cch=2b0a1;`: fields of plain characters.
_VALUE = re.compile(rb"[A-Za-z0-9 .,;:=_+/-]*")


def parse_messages(raw: bytes) -> dict[str, Any]:
    """The body of a Messages request, or `InvalidRequest` (400) saying what is wrong."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Field required (an array of messages).", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequest(f"messages.{i}: must be an object.", param=f"messages.{i}")
        if m.get("role") not in ("user", "assistant"):
            raise InvalidRequest(
                f"messages.{i}.role: Input should be 'user' or 'assistant'.",
                param=f"messages.{i}.role",
            )
        content = m.get("content")
        if not isinstance(content, (str, list)):
            raise InvalidRequest(
                f"messages.{i}.content: must be a string or an array of content blocks.",
                param=f"messages.{i}.content",
            )
    if not _depth_ok(messages, MAX_DEPTH):
        raise InvalidRequest(f"'messages' is nested deeper than {MAX_DEPTH} levels.")
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise InvalidRequest("system: must be a string or an array of text blocks.")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("model: must be a string.", param="model")
    return body


def normalise_billing(raw: bytes) -> bytes:
    """`raw` with Claude Code's billing line reduced to its name, the same every request (the
    client's bytes otherwise untouched); `raw` itself when it has none. Only the line's value
    goes: the block keeps a text, which an API that refuses empty text blocks still takes."""
    at = raw.find(BILLING, 0, BILLING_WINDOW)
    if at < 0:
        return raw
    end = at + len(BILLING)
    # The line ends at its escaped newline or at the end of the JSON string.
    stops = [
        i for i in (raw.find(b"\\n", end, end + 512), raw.find(b'"', end, end + 512)) if i >= 0
    ]
    if not stops:
        return raw
    stop = min(stops)
    # Only a value of plain fields is removed, so the JSON around it stays valid as it was.
    if not _VALUE.fullmatch(raw, end, stop):
        return raw
    return raw[:end] + raw[stop:]


def system_text(system: Any) -> str:
    """The instructions as one text, for counting: a string, or the texts of its blocks."""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(
            b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return ""
