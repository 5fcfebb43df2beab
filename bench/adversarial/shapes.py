"""Conversations around a text: tool turns, agent sessions, and filler that pushes turns out.

The pipeline treats a text by where it sits: a tool result is compacted by stage 1, a message
older than the window is dropped and read for its facts, the latest user message and the
pinned system prompt are never touched. These builders put texts in those places with valid
pairing (every call answered by a result right after it), so a case exercises the path it names
and nothing fails for a malformed request.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from bench.adversarial import texts
from bench.corpus import MODEL

Message = dict[str, Any]
SYSTEM: Message = {
    "role": "system",
    "content": "You are a coding agent. Run tools to inspect the repository, then answer briefly.",
}
QUESTION: Message = {"role": "user", "content": "What failed, and what should I change first?"}
COMMANDS = (
    "pytest -q tests/",
    "git status",
    "cat src/store.py",
    "pip install -e .",
    "ruff check .",
    "kubectl get pods -o json",
)


def call(call_id: str, name: str = "run_shell", **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def tool_turn(
    results: Sequence[str], prefix: str = "call", args: Sequence[str] = ()
) -> list[Message]:
    """One assistant message calling len(results) tools in parallel, then their results.
    `args`: raw argument strings for the calls, in turn (default: a shell command each)."""
    calls = []
    for i in range(len(results)):
        c = call(f"{prefix}_{i}", command=COMMANDS[i % len(COMMANDS)])
        if args:
            c["function"]["arguments"] = args[i % len(args)]
        calls.append(c)
    out: list[Message] = [{"role": "assistant", "content": None, "tool_calls": calls}]
    out += [
        {"role": "tool", "tool_call_id": c["id"], "content": text}
        for c, text in zip(calls, results, strict=True)
    ]
    return out


def filler(tokens: int, seed: int = 1) -> list[Message]:
    """Plain user/assistant turns worth about `tokens` tokens (prose: ~5 characters a token),
    enough to push every earlier turn out of a window of that size."""
    out: list[Message] = []
    i = 0
    while sum(len(m["content"]) for m in out) < tokens * 5:
        out.append({"role": "user", "content": f"Step {i}: " + texts.prose(600, seed + i)})
        out.append({"role": "assistant", "content": f"Done {i}. " + texts.prose(900, seed - i)})
        i += 1
    return out


def body(messages: list[Message], **extra: Any) -> dict[str, Any]:
    """A chat-completions request: the model bench/corpus uses (counted with cl100k_base)."""
    return {"model": MODEL, "messages": messages, **extra}


def with_tool_results(results: Sequence[str], **extra: Any) -> dict[str, Any]:
    """[system, user, assistant calling tools, their results, question]: each result is
    compacted by stage 1 (the window's tool limit), nothing needs trimming after it."""
    start: list[Message] = [SYSTEM, {"role": "user", "content": "Run the checks."}]
    return body([*start, *tool_turn(results), QUESTION], **extra)


def dropped(old: list[Message], window: int) -> list[Message]:
    """`old` as the first turns of a session, then filler worth more than `window`: the old
    turns must be trimmed, so the facts under the marker are read from them."""
    return [SYSTEM, *old, *filler(window + window // 2), QUESTION]


def agent_turn(i: int, rng: random.Random) -> list[Message]:
    """One realistic agent step: a request, a tool call, its short output, a comment."""
    command = COMMANDS[i % len(COMMANDS)]
    lines = rng.randint(3, 30)
    output = "\n".join(
        f"{command.split()[0]}: step {i}.{k} {texts.WORDS[rng.randrange(len(texts.WORDS))]} ok"
        for k in range(lines)
    )
    if i % 7 == 3:
        output += f"\nERROR: test_case_{i} failed: expected {i}, got {i + 1}"
    return [
        {"role": "user", "content": f"Next, check part {i} of the change."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(f"t{i}", command=command, cwd=f"/repo/pkg{i % 9}")],
        },
        {"role": "tool", "tool_call_id": f"t{i}", "content": output},
        {"role": "assistant", "content": f"Part {i}: " + texts.prose(rng.randint(80, 400), i)},
    ]


def session(messages: int, seed: int = 0) -> list[Message]:
    """Exactly `messages` messages: system, agent turns of four, the question last."""
    rng = random.Random(seed)
    out: list[Message] = [SYSTEM]
    i = 0
    while len(out) < messages - 1:
        out += agent_turn(i, rng)
        i += 1
    out = out[: messages - 1]
    while out[-1].get("role") == "assistant" and out[-1].get("tool_calls"):
        out.pop()  # never end on a call without its result
    while len(out) < messages - 1:
        out.append({"role": "assistant", "content": "Checked."})
    return [*out, QUESTION]
