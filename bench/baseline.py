"""The seed baseline that shrink-proxy is measured against: what a naive first version does.

1. every tool result over 800 tokens keeps its first 20 and last 20 lines;
2. then the oldest non-system messages are dropped, one at a time, until the request fits, and
   tool results left at the front without their call go too (a backend would reject them).

It is recomputed from scratch on every request, with the same budget, counter and overhead
accounting as the real pipeline, so the comparison isolates the strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import wire
from proxy.pipeline import REPLY_PRIMING, compute_budget
from proxy.settings import Settings
from proxy.tokenizers import Tokenizers
from proxy.tokens import TokenCounter

Message = dict[str, Any]

SEED_TOOL_LIMIT = 800
SEED_HEAD = 20
SEED_TAIL = 20


@dataclass(frozen=True)
class SeedPlan:
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    budget: int
    fits: bool


def head_tail_lines(text: str, count: TokenCounter) -> str:
    """Seed stage 1: 20 head + 20 tail lines of a result over 800 tokens, else unchanged."""
    lines = text.split("\n")
    if len(lines) <= SEED_HEAD + SEED_TAIL or count.count_text(text) <= SEED_TOOL_LIMIT:
        return text
    gap = len(lines) - SEED_HEAD - SEED_TAIL
    return "\n".join([*lines[:SEED_HEAD], f"[... {gap} lines omitted ...]", *lines[-SEED_TAIL:]])


def seed_messages(messages: list[Message], budget: int, counter: TokenCounter) -> list[Message]:
    """Seed stages 1 and 2 over `messages`, fitting `budget` tokens (tools already subtracted)."""
    out = [
        {**m, "content": head_tail_lines(m["content"], counter)}
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
        else m
        for m in messages
    ]
    pinned = 0
    while pinned < len(out) and out[pinned].get("role") in ("system", "developer"):
        pinned += 1
    head, rest = out[:pinned], out[pinned:]
    counts = [counter.count_message(m) for m in rest]
    total = sum(counter.count_message(m) for m in head) + sum(counts) + REPLY_PRIMING
    drop = 0
    # The latest message (the user's question) is never dropped, even when it alone is too big.
    while total > budget and drop < len(rest) - 1:
        total -= counts[drop]
        drop += 1
        while drop < len(rest) - 1 and rest[drop].get("role") == "tool":
            total -= counts[drop]
            drop += 1
    return head + rest[drop:]


def seed_plan(body: dict[str, Any], settings: Settings, tokenizers: Tokenizers) -> SeedPlan:
    """The seed's version of `Shrinker.plan_sync(body, "auto")`: same window, budget and counts."""
    model = body.get("model")
    counter = tokenizers.for_model(model)
    budget = compute_budget(
        settings.window_for(model),
        wire.requested_completion_tokens(body),
        default_reserve=settings.completion_reserve,
        floor=settings.min_prompt_budget,
        margin_share=settings.safety_margin if counter.exact else settings.estimate_safety_margin,
    )
    fixed = counter.count_tools(body.get("tools"))
    messages = body["messages"]
    before = fixed + counter.count_messages(messages)
    out = seed_messages(messages, budget.prompt - fixed, counter)
    after = fixed + counter.count_messages(out)
    return SeedPlan(out, before, after, budget.prompt, after <= budget.prompt)
