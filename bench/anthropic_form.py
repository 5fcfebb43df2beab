"""A chat-completions conversation in the Anthropic Messages form: the same corpus, the other API.

A pure conversion, for benchmarks that run the dev corpus through the `/v1/messages` path
(`to_anthropic(conversation.request())`), plus the two checks they need on its output: the texts
a needle may survive in (`haystack`, the counterpart of `bench.corpus.haystack`) and tool pairing
(`pairing_ok`, the counterpart of `bench.corpus.pairing_ok`). `claude_code(body, turn)` dresses a
converted request the way Claude Code sends one (billing line, cache breakpoints, thinking with
signatures, its beta headers), for the tests and benches that need that shape.

How each chat item maps (what Claude Code itself sends, and what the Messages API accepts):

- leading `system` / `developer` messages -> the top-level `system`: a string when there is one
  with string content, otherwise text blocks (one per text). A system message later in the
  conversation (which the Messages API has no place for) becomes user text.
- `user` -> `user`; text parts -> text blocks; `image_url` parts -> `image` blocks (base64 for a
  data URL, else a URL source).
- `assistant` -> `assistant`: its text, then one `tool_use` block per tool call (`id` = the call
  id, `input` = the parsed JSON arguments, or `{"raw": arguments}` when they are not a JSON
  object: the API takes only objects).
- consecutive `tool` results -> one `user` message of `tool_result` blocks (`tool_use_id` = the
  call id), in order; a user message right after them joins it, after the results (the API wants
  results first).
- consecutive messages of one role are merged (the API wants turns to alternate); a message that
  stands alone with string content keeps it as a string.
- `tools` -> `name`, `description`, `input_schema` (the function's `parameters`).
- `max_tokens` (or `max_completion_tokens`, else `default_max_tokens`: the API requires it),
  `model`, `stream`, `temperature`, `top_p`, `stop` (-> `stop_sequences`), `tool_choice` (-> `auto`
  / `any` / `none` / `tool`) carry over; other chat-only fields are left out.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from typing import Any

Message = dict[str, Any]
Block = dict[str, Any]

DEFAULT_MAX_TOKENS = 1024
_CARRIED = ("model", "stream", "temperature", "top_p")
_SYSTEM_ROLES = ("system", "developer")


def to_anthropic(
    chat_body: dict[str, Any], *, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """The Anthropic Messages request for a chat-completions request body (not modified)."""
    messages: list[Message] = list(chat_body.get("messages") or [])
    out: dict[str, Any] = {k: chat_body[k] for k in _CARRIED if k in chat_body}
    max_tokens = chat_body.get("max_tokens") or chat_body.get("max_completion_tokens")
    out["max_tokens"] = max_tokens if isinstance(max_tokens, int) else default_max_tokens

    lead = 0
    while lead < len(messages) and messages[lead].get("role") in _SYSTEM_ROLES:
        lead += 1
    if lead:
        out["system"] = _system(messages[:lead])

    turns: list[tuple[str, list[Block], Any]] = []  # (role, blocks, the content if it stood alone)
    for m in messages[lead:]:
        role, blocks = _turn(m)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1] = (role, turns[-1][1] + blocks, None)
        else:
            turns.append((role, blocks, m.get("content") if _keeps_string(m) else None))
    out["messages"] = [
        {"role": role, "content": alone if alone is not None else blocks}
        for role, blocks, alone in turns
    ]

    tools = [_tool(t) for t in chat_body.get("tools") or [] if isinstance(t, dict)]
    if tools:
        out["tools"] = tools
    if (choice := _tool_choice(chat_body.get("tool_choice"))) is not None:
        out["tool_choice"] = choice
    stop = chat_body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = list(stop)
    return out


def _keeps_string(m: Message) -> bool:
    content = m.get("content")
    return (
        m.get("role") in ("user", "assistant")
        and isinstance(content, str)
        and bool(content)
        and not m.get("tool_calls")
    )


def _system(messages: list[Message]) -> str | list[Block]:
    if len(messages) == 1 and isinstance(messages[0].get("content"), str):
        return str(messages[0]["content"])
    return [b for m in messages for b in _content_blocks(m.get("content")) if b["type"] == "text"]


def _turn(m: Message) -> tuple[str, list[Block]]:
    role = m.get("role")
    if role == "tool":
        result: Block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id")}
        content = m.get("content")
        if isinstance(content, str):
            result["content"] = content
        elif isinstance(content, list):
            result["content"] = _content_blocks(content)
        return "user", [result]
    if role == "assistant":
        blocks = _content_blocks(m.get("content"))
        blocks.extend(_tool_use(c) for c in m.get("tool_calls") or [] if isinstance(c, dict))
        return "assistant", blocks
    # user, or a system message past the leading ones: user text either way
    return "user", _content_blocks(m.get("content"))


def _content_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    out: list[Block] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str) and part["text"]:
            out.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            image = _image(part.get("image_url"))
            if image is not None:
                out.append(image)
    return out


def _image(spec: Any) -> Block | None:
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str):
        return None
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _tool_use(call: dict[str, Any]) -> Block:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    parsed: Any = None
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
    elif isinstance(arguments, dict):
        parsed = arguments
    if not isinstance(parsed, dict):
        parsed = {"raw": arguments if isinstance(arguments, str) else json.dumps(arguments)}
    return {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": parsed}


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    out: dict[str, Any] = {"name": function.get("name")}
    if function.get("description"):
        out["description"] = function["description"]
    schema = function.get("parameters")
    out["input_schema"] = schema if isinstance(schema, dict) else {"type": "object"}
    return out


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name")}
    return None


# --- checks on the converted form -------------------------------------------------------------


def texts(body: dict[str, Any]) -> list[str]:
    """Every text of an Anthropic request a reader could find a fact in: the system, text
    blocks, tool results, and the string values inside tool_use inputs (as `raw` holds
    unparsable arguments whole), in order."""
    out: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append(system)
    elif isinstance(system, list):
        out.extend(_block_texts(system))
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(_block_texts(content))
    return out


def _block_texts(blocks: list[Any]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif b.get("type") == "tool_result":
            content = b.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(_block_texts(content))
        elif b.get("type") == "tool_use":
            out.append(json.dumps(b.get("input"), ensure_ascii=False))
            out.extend(_strings(b.get("input")))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def haystack(body: dict[str, Any]) -> str:
    """`texts` NUL-separated: a needle is kept when its answer is a substring of this."""
    return "\0".join(texts(body))


def pairing_ok(body: dict[str, Any]) -> bool:
    """Every `tool_use` of an assistant turn is answered by a `tool_result` in the user turn right
    after it, every `tool_result` answers a `tool_use` of the assistant turn before it, and a
    user turn's results come before its other blocks (what the Messages API enforces)."""
    pending: set[Any] = set()
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m.get("content"), list) else []
        blocks = [b for b in content if isinstance(b, dict)]
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if m.get("role") == "user":
            kinds = [b.get("type") == "tool_result" for b in blocks]
            if results != pending or kinds != sorted(kinds, reverse=True):
                return False
            pending = set()
        elif m.get("role") == "assistant":
            if pending or results:
                return False
            pending = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    return not pending


# --- Claude Code's request shape ----------------------------------------------------------------

CLAUDE_CODE_VERSION = "2.1.177"
CLAUDE_CODE_IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."
CLAUDE_CODE_BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
)
BILLING_PREFIX = "x-anthropic-billing-header:"
EPHEMERAL = {"type": "ephemeral"}


def billing_line(turn: int) -> str:
    """Claude Code's per-request first system block (2.1.29 and later): a version suffix and a
    `cch` that change every request (here derived from `turn`, so runs are reproducible)."""
    digest = hashlib.sha256(str(turn).encode()).hexdigest()
    return (
        f"{BILLING_PREFIX} cc_version={CLAUDE_CODE_VERSION}.{digest[:3]}; "
        f"cc_entrypoint=cli; cch={digest[3:8]};"
    )


def claude_code(body: dict[str, Any], turn: int) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers, body) of `body` (in this module's Anthropic form) sent the way Claude Code sends
    a request, as public captures of its traffic show it:

    - `system` as blocks: the billing line of this `turn` alone first, then Claude Code's
      identity line, then the prompt, the last two with `cache_control` breakpoints;
    - a `thinking` block with its `signature` opening every assistant turn (interleaved
      thinking), `thinking` enabled, `stream`, `metadata.user_id`, a large `max_tokens`;
    - a `cache_control` breakpoint on the last block of the latest user message (3 in all, of
      the API's 4 at most);
    - headers `anthropic-version`, `anthropic-beta`, `x-app: cli`, Claude Code's user agent.

    Pure: `body` is not modified; only the billing line depends on `turn`.
    """
    out = copy.deepcopy(body)
    system = out.get("system")
    prompt = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    blocks: list[Block] = [
        {"type": "text", "text": billing_line(turn)},
        {"type": "text", "text": CLAUDE_CODE_IDENTITY, "cache_control": dict(EPHEMERAL)},
        *prompt,
    ]
    if prompt:
        blocks[-1] = {**blocks[-1], "cache_control": dict(EPHEMERAL)}
    out["system"] = blocks
    messages = out.get("messages") or []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            content = m["content"]
            content = [{"type": "text", "text": content}] if isinstance(content, str) else content
            m["content"] = [_thinking(i), *content]
    users = [m for m in messages if m.get("role") == "user"]
    if users:
        last = users[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        if last["content"]:
            last["content"][-1] = {**last["content"][-1], "cache_control": dict(EPHEMERAL)}
    out.update(
        stream=True,
        max_tokens=32000,
        thinking={"type": "enabled", "budget_tokens": 31999},
        metadata={"user_id": "user_0123abcd_account__session_00000000-0000-4000-8000-000000000000"},
    )
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": CLAUDE_CODE_BETAS,
        "x-app": "cli",
        "user-agent": f"claude-cli/{CLAUDE_CODE_VERSION} (external, cli)",
    }
    return headers, out


def _thinking(index: int) -> Block:
    digest = hashlib.sha256(f"thinking {index}".encode()).digest()
    return {
        "type": "thinking",
        "thinking": f"Step {index}: decide what to run next.",
        "signature": base64.b64encode(digest * 4).decode(),
    }


def breakpoints(body: dict[str, Any]) -> int:
    """How many `cache_control` breakpoints a request carries (the API allows 4 at most)."""
    n = 0
    system = body.get("system")
    for holder in (system if isinstance(system, list) else [], body.get("tools") or []):
        n += sum(1 for b in holder if isinstance(b, dict) and "cache_control" in b)
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
    return n
