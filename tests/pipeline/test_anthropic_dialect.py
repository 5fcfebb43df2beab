"""The engine on Anthropic Messages conversations: the chat invariants, plus signed thinking
blocks byte-identical, the current tool-use cycle kept whole, and cache_control breakpoints
never added or moved."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from proxy.pipeline import CallCounter, compute_budget, shrink
from proxy.pipeline.anthropic import ANTHROPIC, IMAGE_TOKENS
from proxy.pipeline.types import Policy
from proxy.tokenizers import Tokenizers
from proxy.tokens import ShapedCounter
from tests.shared_dir import TIKTOKEN_CACHE

TOKENS = Tokenizers(cache_dir=str(TIKTOKEN_CACHE)).for_model("claude-sonnet-4-5")
POLICY = Policy()


def counter() -> ShapedCounter:
    return ShapedCounter(TOKENS, ANTHROPIC)


def log(rng: random.Random, lines: int) -> str:
    out = [f"collecting item {i} of {lines} in tests/test_mod_{i % 17}.py" for i in range(lines)]
    out.insert(rng.randrange(lines), "FAILED tests/test_x.py::test_needle - AssertionError: 41")
    return "\n".join(out)


def conversation(seed: int, turns: int = 12, thinking: bool = True) -> list[dict[str, Any]]:
    """User turns, each answered by a few tool_use/tool_result rounds with thinking blocks."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    n = 0
    for t in range(turns):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"turn {t}: fix the tests"}]}
        )
        for r in range(rng.randint(1, 3)):
            n += 1
            blocks: list[dict[str, Any]] = []
            if thinking and r == 0:
                blocks.append(
                    {"type": "thinking", "thinking": f"plan {t}", "signature": f"sig{t}=="}
                )
            blocks.append(
                {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": {"cmd": "pytest"}}
            )
            messages.append({"role": "assistant", "content": blocks})
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{n}",
                "content": log(rng, rng.randint(50, 600)),
            }
            if rng.random() < 0.3:
                result["is_error"] = True
            if rng.random() < 0.3:
                result["content"] = [{"type": "text", "text": result["content"]}]
            messages.append(
                {
                    "role": "user",
                    "content": [result, {"type": "text", "text": "<system-reminder>ok"}],
                }
            )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"done {t}"}]})
    messages.append({"role": "user", "content": "now run the whole suite"})
    return messages


def plan_of(messages: list[dict[str, Any]], window: int, memo: dict[Any, Any] | None = None) -> Any:
    budget = compute_budget(window, 1024, default_reserve=1024, floor=256, margin_share=0.05)
    return shrink(
        messages,
        budget=budget,
        counter=CallCounter(counter()),
        policy=POLICY,
        memo=memo,
        dialect=ANTHROPIC,
    )


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def ids(messages: list[dict[str, Any]], kind: str, field: str) -> list[str]:
    return [
        b[field]
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == kind
    ]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [4096, 8192, 16384])
def test_the_chat_invariants_hold_on_messages(seed: int, window: int) -> None:
    messages = conversation(seed)
    before = dumps(messages)
    plan = plan_of(messages, window)
    out = plan.messages
    assert dumps(messages) == before  # inputs never mutated
    assert plan.report.tokens_after <= plan.report.tokens_before
    assert plan.report.fits
    assert out[-1] == messages[-1]  # the latest user turn intact
    assert sorted(ids(out, "tool_use", "id")) == sorted(ids(out, "tool_result", "tool_use_id"))
    assert all(m["role"] in ("user", "assistant") for m in out)
    # Every signed block that is still there is byte-identical, and sits in its message.
    signed = {dumps(b) for m in messages for b in m["content"] if isinstance(m["content"], list)}
    for m in out:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") in ("thinking", "redacted_thinking"):
                assert dumps(b) in signed
    # Idempotent: the plan of the plan changes nothing.
    again = plan_of(out, window)
    assert again.messages == out or not again.changed


def test_nothing_changes_when_it_fits() -> None:
    messages = conversation(1, turns=1)
    budget = compute_budget(200_000, 1024, default_reserve=1024, floor=256, margin_share=0.05)
    policy = Policy(tool_max_tokens=10**6, tool_window_share=1)
    plan = shrink(messages, budget=budget, counter=counter(), policy=policy, dialect=ANTHROPIC)
    assert not plan.changed and plan.messages is messages


def test_stage_one_compacts_tool_results_and_keeps_their_fields() -> None:
    messages = conversation(2, turns=3)
    plan = plan_of(messages, 16384)
    assert plan.report.actions.get("tools")
    for m_in, m_out in zip(messages, plan.messages, strict=False):
        if m_in is m_out or not isinstance(m_in["content"], list):
            continue
        for b_in, b_out in zip(m_in["content"], m_out["content"], strict=True):
            assert {k: v for k, v in b_in.items() if k != "content"} == {
                k: v for k, v in b_out.items() if k != "content"
            }


def test_the_current_tool_cycle_with_thinking_is_one_unit() -> None:
    messages = conversation(3, turns=1)
    messages.pop()  # the cycle is still under way: the last message is a tool result
    units = ANTHROPIC.group_units(messages, 0)
    assert units[-1] == (1, len(messages))
    plain = conversation(3, turns=1, thinking=False)
    plain.pop()
    assert len(ANTHROPIC.group_units(plain, 0)) > 2


def test_the_marker_is_a_user_turn() -> None:
    plan = plan_of(conversation(4, turns=20), 4096)
    assert plan.report.actions.get("trim")
    marker = plan.messages[plan.marker_index]
    assert marker["role"] == "user" and "omitted" in marker["content"]


def test_cache_control_is_never_added() -> None:
    messages = conversation(5)
    messages[-2]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    plan = plan_of(messages, 4096)
    marks = dumps(plan.messages).count(b"cache_control")
    assert marks <= 1


def test_an_image_costs_a_fixed_price_not_its_base64() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000},
    }
    n = counter().count_message({"role": "user", "content": [image]})
    assert IMAGE_TOKENS <= n < IMAGE_TOKENS + 20


def test_a_sticky_cut_survives_turns() -> None:
    memo: dict[Any, Any] = {}
    messages = conversation(6, turns=30)
    cuts = []
    for end in range(len(messages) - 40, len(messages) + 1, 4):
        turn = messages[:end]
        if turn[-1]["role"] != "user":
            continue
        plan = plan_of(turn, 8192, memo)
        cuts.append(plan.marker_index is not None and len(turn) - len(plan.messages))
    moves = sum(1 for a, b in zip(cuts, cuts[1:], strict=False) if a != b)
    assert moves <= len(cuts) // 2
