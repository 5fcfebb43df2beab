"""Request bodies: a small chat (~200 tokens) and a large agent conversation from the corpus.

The large body is a real agent conversation cut to a token target at a turn boundary (tool calls
stay paired with their results) plus a closing user message. Each body is a template holding
`NONCE` in the last user message and in every tool result: the load generator substitutes the
same value each time ("warm": the proxy's per-message caches hit) or a fresh one per request
("cold": every tool result and the last message are new, so those caches miss). The nonce has a
fixed width, so warm and cold bodies have the same length.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.shared_dir import use_offline_encodings

# Replaced by the load generator with `nonce-` + 16 decimal digits (same width).
NONCE = b"nonce-@@@@@@@@@@@@@@@@"
# Nonces are 16 decimal digits: tiktoken splits digits in runs of three, so every nonce costs the
# same tokens and a cold body is exactly as large as the warm one (hex nonces varied by ~10
# tokens each, and near a budget's edge some cold bodies needed a trim the warm one did not).
WARM_NONCE = b"nonce-%016d" % 2718281828459045
MODEL = "qwen2.5-coder:7b"  # a local model name: the proxy counts it with cl100k_base

SMALL_SYSTEM = (
    "You are a careful senior Python engineer. Answer briefly, show the smallest change that "
    "fixes the problem, and say why it works. Do not invent APIs; when unsure, say so."
)
SMALL_USER = (
    "My FastAPI endpoint streams an upstream response with StreamingResponse, but when the "
    "client disconnects the upstream request keeps running for minutes. I call "
    "client.send(request, stream=True) on a shared httpx.AsyncClient and return "
    "StreamingResponse(resp.aiter_raw()). How do I make sure the upstream connection is closed "
    "as soon as the client goes away, and is there a way to test it on loopback without "
    "mocking? Also, should I use aiter_raw or aiter_bytes if the upstream may gzip the "
    "response? Context: Python 3.11, uvicorn with httptools and uvloop, one worker. "
)


@dataclass(frozen=True)
class Body:
    """A body template (bytes with NONCE) and what it holds."""

    name: str
    template: bytes
    tokens: int
    messages: int

    def warm(self) -> bytes:
        return self.template.replace(NONCE, WARM_NONCE)


def _mark_text(content: Any) -> Any:
    marker = f"\n[{NONCE.decode()}]"
    if isinstance(content, str):
        return content + marker
    if isinstance(content, list):
        return [*content, {"type": "text", "text": marker}]
    return content


def small_body(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SMALL_SYSTEM},
            {"role": "user", "content": SMALL_USER + f"[{NONCE.decode()}]"},
        ],
        "temperature": 0.2,
    }
    if stream:
        body["stream"] = True
    return body


def large_body(conversation: Path, target_tokens: int, counter: Any, stream: bool) -> dict:
    """The longest prefix of the conversation that ends before an assistant turn and fits
    `target_tokens` (tools included), then a closing user message; tool results get NONCE."""
    data = json.loads(conversation.read_bytes())
    tools = data.get("tools")
    messages = data["messages"]
    fixed = counter.count_tools(tools)
    best = 1
    total = fixed
    for i, m in enumerate(messages):
        total += counter.count_message(m)
        if total > target_tokens:
            break
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        if nxt is None or nxt.get("role") == "assistant":
            best = i + 1
    kept = [dict(m) for m in messages[:best]]
    for m in kept:
        if m.get("role") == "tool":
            m["content"] = _mark_text(m.get("content"))
    kept.append(
        {
            "role": "user",
            "content": "Carry on from here: summarise what is left to do, then do the next step. "
            f"[{NONCE.decode()}]",
        }
    )
    body: dict[str, Any] = {"model": MODEL, "messages": kept, "temperature": 0.2}
    if tools:
        body["tools"] = tools
    if stream:
        body["stream"] = True
    return body


def encode(body: dict[str, Any]) -> bytes:
    # Compact separators, as orjson and most SDKs send; the upstream searches `"stream":true`.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def build(corpus: Path, conversation: str, target_tokens: int, counter: Any) -> dict[str, Body]:
    """Every body the scenarios use, by name (`small-json`, `small-sse`, `large-json`, ...)."""
    matches = sorted(corpus.glob(f"{conversation}*.json"))
    if not matches:
        raise FileNotFoundError(f"no {conversation}*.json in {corpus}")
    out: dict[str, Body] = {}
    for stream in (False, True):
        kind = "sse" if stream else "json"
        for size, body in (
            ("small", small_body(stream)),
            ("large", large_body(matches[0], target_tokens, counter, stream)),
        ):
            tokens = counter.count_messages(body["messages"]) + counter.count_tools(
                body.get("tools")
            )
            out[f"{size}-{kind}"] = Body(
                f"{size}-{kind}", encode(body), tokens, len(body["messages"])
            )
    return out


def encode_ms(encoding: Any, raw: bytes, reps: int = 7) -> float:
    """Median CPU time for tiktoken to encode the whole body text once: the cost caches avoid.
    CPU (thread) time, like the servers' CPU per request, so other load on the machine does not
    inflate it."""
    text = raw.decode()
    times = []
    for _ in range(reps):
        start = time.thread_time()
        encoding.encode_ordinary(text)
        times.append(time.thread_time() - start)
    return statistics.median(times) * 1000


def default_tiktoken_dir() -> str | None:
    """The environment's TIKTOKEN_CACHE_DIR, else the shared folder's when it exists
    (tests/shared_dir.py), for the processes the benchmark starts."""
    return use_offline_encodings(dict(os.environ))
