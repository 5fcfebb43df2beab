"""A chat-completions conversation in the Responses form: the same corpus, the third API.

A pure conversion, for the tests and benchmarks that run the dev corpus through `/v1/responses`
(`to_responses(conversation.request())`), the checks they need on its output (`haystack`, the
texts a needle may survive in; `pairing_ok`, every call answered and every output answering),
and `codex(body)`, the request dressed the way Codex CLI sends one.

How each chat item maps (what Codex itself sends, and what the Responses API accepts):

- a leading `system` message -> `instructions` (a string: its texts joined); later system or
  developer messages -> `developer` message items.
- `user` -> a `message` item of `input_text` parts (`image_url` parts -> `input_image`).
- `assistant` -> its text as a `message` item of one `output_text` part, then one
  `function_call` item per tool call (`call_id` = the call id, `arguments` as sent).
- `tool` -> a `function_call_output` item (`call_id` = its `tool_call_id`, `output` its text).
- `tools` -> `{"type": "function", "name", "description", "parameters"}`;
  `max_tokens` / `max_completion_tokens` -> `max_output_tokens`; `model`, `stream`,
  `temperature`, `top_p` carry over.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

Item = dict[str, Any]

_CARRIED = ("model", "stream", "temperature", "top_p")
CALLS = ("function_call", "custom_tool_call", "local_shell_call", "apply_patch_call")


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return []


def _parts(content: Any, text_type: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": text_type, "text": content}]
    out: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append({"type": text_type, "text": p["text"]})
        elif p.get("type") == "image_url":
            url = (
                p["image_url"]["url"]
                if isinstance(p.get("image_url"), dict)
                else p.get("image_url")
            )
            out.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return out


def to_responses(chat_body: dict[str, Any]) -> dict[str, Any]:
    """The Responses request for a chat-completions request body (not modified)."""
    messages = list(chat_body.get("messages") or [])
    out: dict[str, Any] = {k: chat_body[k] for k in _CARRIED if k in chat_body}
    if messages and messages[0].get("role") == "system":
        out["instructions"] = "\n".join(_texts(messages.pop(0).get("content")))
    items: list[Item] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role in ("system", "developer"):
            items.append(
                {"type": "message", "role": "developer", "content": _parts(content, "input_text")}
            )
        elif role == "user":
            items.append(
                {"type": "message", "role": "user", "content": _parts(content, "input_text")}
            )
        elif role == "assistant":
            if text := "\n".join(_texts(content)):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                )
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "{}",
                    }
                )
        elif role in ("tool", "function"):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m.get("tool_call_id"),
                    "output": "\n".join(_texts(content)),
                }
            )
    out["input"] = items
    if chat_body.get("tools"):
        out["tools"] = [
            {
                "type": "function",
                "name": t["function"].get("name"),
                "description": t["function"].get("description", ""),
                "parameters": t["function"].get("parameters", {"type": "object"}),
            }
            for t in chat_body["tools"]
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
    max_tokens = chat_body.get("max_tokens") or chat_body.get("max_completion_tokens")
    if max_tokens:
        out["max_output_tokens"] = max_tokens
    return out


def encrypted(seed: str, size: int = 1200) -> str:
    """An opaque stand-in for a reasoning item's `encrypted_content` (base64-looking)."""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return "gAAAAB" + (digest * (size // len(digest) + 1))[:size]


def codex(body: dict[str, Any], session: str = "sess-1") -> dict[str, Any]:
    """`body` (this module's form) sent the way Codex CLI sends a turn over HTTP: the whole
    history in `input`, a `reasoning` item with `encrypted_content` (and a summary) opening each
    model response, `include: ["reasoning.encrypted_content"]`, `store: false`, streaming, a
    `prompt_cache_key`, and its other fixed fields."""
    items: list[Item] = []
    previous: Item | None = None
    for n, item in enumerate(copy.deepcopy(body["input"])):
        produced = item.get("type") in CALLS or item.get("role") == "assistant"
        if produced and not (
            previous is not None
            and (previous.get("type") in CALLS or previous.get("role") == "assistant")
        ):
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{n:04d}",
                    "summary": [{"type": "summary_text", "text": f"**Planning step {n}**"}],
                    "content": None,
                    "encrypted_content": encrypted(f"{session}/{n}"),
                }
            )
        items.append(item)
        previous = item
    return {
        **{k: v for k, v in body.items() if k != "input"},
        "input": items,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": session,
        "text": {"verbosity": "medium"},
    }


def pairing_ok(body: dict[str, Any]) -> bool:
    """Every call has exactly one output and every output answers a call before it."""
    calls: set[Any] = set()
    answered: set[Any] = set()
    for item in body.get("input") or []:
        kind = item.get("type") or ""
        if kind in CALLS or (kind.endswith("_call") and "call_id" in item):
            calls.add(item.get("call_id"))
        elif kind.endswith("_output"):
            cid = item.get("call_id")
            if cid not in calls or cid in answered:
                return False
            answered.add(cid)
    return answered == calls


def haystack(body: dict[str, Any]) -> str:
    """Every text the model is shown: instructions, message texts, outputs, call arguments."""
    out = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    for item in body.get("input") or []:
        if isinstance(item.get("content"), (str, list)):
            out += _texts(item["content"])
        if isinstance(item.get("output"), (str, list)):
            out += _texts(item["output"])
        if isinstance(item.get("arguments"), str):
            out.append(item["arguments"])
    return "\n".join(out)
