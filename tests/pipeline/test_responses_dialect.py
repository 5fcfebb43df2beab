"""The engine on Responses `input` items: the chat invariants, plus calls and outputs paired by
call_id, reasoning and compaction items byte-identical, unknown items carried whole, and a
marker that is a valid input item."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from proxy.pipeline import CallCounter, compute_budget, shrink
from proxy.pipeline.responses import IMAGE_TOKENS, RESPONSES
from proxy.pipeline.types import Policy
from proxy.tokenizers import Tokenizers
from proxy.tokens import ShapedCounter
from tests.shared_dir import TIKTOKEN_CACHE

TOKENS = Tokenizers(cache_dir=str(TIKTOKEN_CACHE)).for_model("gpt-5-codex")
POLICY = Policy()
CALLS = ("function_call", "custom_tool_call", "local_shell_call", "apply_patch_call")


def counter() -> ShapedCounter:
    return ShapedCounter(TOKENS, RESPONSES)


def log(rng: random.Random, lines: int) -> str:
    out = [f"collecting item {i} of {lines} in tests/test_mod_{i % 17}.py" for i in range(lines)]
    out.insert(rng.randrange(lines), "FAILED tests/test_x.py::test_needle - AssertionError: 41")
    return "\n".join(out)


def call_item(kind: str, cid: str) -> dict[str, Any]:
    if kind == "function_call":
        return {"type": kind, "name": "shell", "arguments": '{"cmd":["pytest"]}', "call_id": cid}
    if kind == "custom_tool_call":
        return {"type": kind, "name": "apply_patch", "input": "*** Begin Patch", "call_id": cid}
    if kind == "local_shell_call":
        action = {"type": "exec", "command": ["pytest", "-q"]}
        return {"type": kind, "id": f"lsh_{cid}", "call_id": cid, "action": action}
    return {"type": kind, "call_id": cid, "operation": {"type": "update_file", "path": "a.py"}}


def conversation(seed: int, turns: int = 12, reasoning: bool = True) -> list[dict[str, Any]]:
    """Codex-shaped input: developer instructions, user turns, each answered by a few
    responses of reasoning + calls whose outputs follow, an MCP item now and then."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "sandbox"}],
        }
    ]
    n = 0
    for t in range(turns):
        items.append(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"turn {t}: fix it"}],
            }
        )
        for _ in range(rng.randint(1, 3)):
            if reasoning:
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{n}",
                        "summary": [{"type": "summary_text", "text": f"plan {t}"}],
                        "encrypted_content": f"gAAAA{n:04d}" + "x" * 200,
                    }
                )
            cids = []
            for _ in range(rng.randint(1, 2)):
                n += 1
                cid = f"call_{n}"
                cids.append(cid)
                items.append(call_item(rng.choice(CALLS), cid))
            for cid, kind in zip(cids, [i["type"] for i in items[-len(cids) :]], strict=True):
                output: Any = log(rng, rng.randint(50, 600))
                if rng.random() < 0.3:
                    output = [{"type": "input_text", "text": output}]
                items.append({"type": f"{kind}_output", "call_id": cid, "output": output})
            if rng.random() < 0.2:
                items.append(
                    {"type": "mcp_list_tools", "id": f"mcpl_{n}", "server_label": "x", "tools": []}
                )
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"done {t}"}],
            }
        )
    items.append({"role": "user", "content": "now run the whole suite"})
    return items


def plan_of(items: list[dict[str, Any]], window: int, memo: dict[Any, Any] | None = None) -> Any:
    budget = compute_budget(window, 1024, default_reserve=1024, floor=256, margin_share=0.05)
    return shrink(
        items,
        budget=budget,
        counter=CallCounter(counter()),
        policy=POLICY,
        memo=memo,
        dialect=RESPONSES,
    )


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def call_ids(items: list[dict[str, Any]], outputs: bool) -> list[str]:
    return sorted(
        i["call_id"] for i in items if "call_id" in i and i["type"].endswith("_output") == outputs
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [4096, 8192, 16384])
def test_the_chat_invariants_hold_on_responses_items(seed: int, window: int) -> None:
    items = conversation(seed)
    before = dumps(items)
    plan = plan_of(items, window)
    out = plan.messages
    assert dumps(items) == before  # inputs never mutated
    assert plan.report.tokens_after <= plan.report.tokens_before
    assert plan.report.fits
    assert out[-1] == items[-1]  # the latest user turn intact
    assert out[0] == items[0]  # the pinned developer message
    assert call_ids(out, outputs=False) == call_ids(out, outputs=True)
    # Every reasoning / unknown item still there is byte-identical to one that came in.
    whole = {dumps(i) for i in items if i.get("type") in ("reasoning", "mcp_list_tools")}
    for i in out:
        if i.get("type") in ("reasoning", "mcp_list_tools"):
            assert dumps(i) in whole
    # Calls are never edited, only outputs and texts.
    sent = {dumps(i) for i in items if i.get("type") in CALLS}
    assert all(dumps(i) in sent for i in out if i.get("type") in CALLS)
    again = plan_of(out, window)
    assert again.messages == out or not again.changed


def test_nothing_changes_when_it_fits() -> None:
    items = conversation(1, turns=1)
    budget = compute_budget(200_000, 1024, default_reserve=1024, floor=256, margin_share=0.05)
    policy = Policy(tool_max_tokens=10**6, tool_window_share=1)
    plan = shrink(items, budget=budget, counter=counter(), policy=policy, dialect=RESPONSES)
    assert not plan.changed and plan.messages is items


def test_stage_one_compacts_outputs_and_keeps_their_fields() -> None:
    items = conversation(2, turns=3)
    plan = plan_of(items, 16384)
    assert plan.report.actions.get("tools")
    changed = [(a, b) for a, b in zip(items, plan.messages, strict=False) if a is not b]
    assert changed
    for a, b in changed:
        assert a["type"].endswith("_output")
        assert {k: v for k, v in a.items() if k != "output"} == {
            k: v for k, v in b.items() if k != "output"
        }
        assert len(dumps(b["output"])) < len(dumps(a["output"]))


def test_a_response_and_its_outputs_are_one_unit() -> None:
    items = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "a"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "b"},
        {"type": "function_call_output", "call_id": "a", "output": "1"},
        {"type": "function_call_output", "call_id": "b", "output": "2"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"role": "user", "content": "again"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
        {"type": "function_call_output", "call_id": "c", "output": "3"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "d"},
        {"type": "function_call_output", "call_id": "d", "output": "4"},
    ]
    assert RESPONSES.group_units(items, 0) == [(0, 1), (1, 6), (6, 7), (7, 8), (8, 10), (10, 12)]
    # A reasoning item in the current cycle makes the cycle one unit.
    items.insert(10, {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "e2"})
    assert RESPONSES.group_units(items, 0)[-1] == (8, 13)


def test_an_output_joins_its_call_by_call_id_wherever_it_is() -> None:
    items = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "a"},
        {"role": "user", "content": "meanwhile"},
        {"type": "message", "role": "assistant", "content": "hm"},
        {"type": "function_call_output", "call_id": "a", "output": "1"},
        {"role": "user", "content": "last"},
    ]
    assert RESPONSES.group_units(items, 0) == [(0, 1), (1, 5), (5, 6)]


def test_the_marker_is_a_valid_input_message() -> None:
    plan = plan_of(conversation(4, turns=20), 4096)
    assert plan.report.actions.get("trim")
    marker = plan.messages[plan.marker_index]
    assert marker["type"] == "message" and marker["role"] in ("user", "system", "developer")
    assert isinstance(marker["content"], str) and "omitted" in marker["content"]


def test_an_image_costs_a_fixed_price_not_its_base64() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 100_000}
    n = counter().count_message({"type": "message", "role": "user", "content": [image]})
    assert IMAGE_TOKENS <= n < IMAGE_TOKENS + 20


def test_reasoning_is_never_a_text_to_cut() -> None:
    item = {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "x"}]}
    assert RESPONSES.texts(item) == [] and RESPONSES.result_texts(item) == []
    compaction = {"type": "compaction", "encrypted_content": "e" * 10_000}
    assert RESPONSES.texts(compaction) == []
    assert counter().count_message(compaction) < 64  # not its 10,000 characters


def test_an_unknown_item_is_counted_and_kept() -> None:
    item = {"type": "web_search_call", "id": "ws", "action": {"query": "x " * 500}}
    assert counter().count_message(item) > 400
    items = [*conversation(7, turns=4)[:-1], item, {"role": "user", "content": "go on"}]
    plan = plan_of(items, 100_000)
    assert item in plan.messages


def test_a_sticky_cut_survives_turns() -> None:
    memo: dict[Any, Any] = {}
    items = conversation(6, turns=30)
    cuts = []
    for end in range(len(items) - 60, len(items) + 1, 3):
        turn = items[:end]
        if turn[-1].get("role") != "user":
            continue
        plan = plan_of(turn, 8192, memo)
        cuts.append(plan.marker_index is not None and len(turn) - len(plan.messages))
    moves = sum(1 for a, b in zip(cuts, cuts[1:], strict=False) if a != b)
    assert moves <= len(cuts) // 2


def test_compact_modes_summary_replaces_the_marker_with_a_message_item() -> None:
    from proxy.pipeline.summary import apply_summary

    plan = plan_of(conversation(8, turns=20), 4096)
    i = plan.marker_index
    out = apply_summary(plan.messages, i, "the tests were fixed", "user", RESPONSES)
    assert out[i] == {"type": "message", "role": "user", "content": "the tests were fixed"}
    assert out[:i] == plan.messages[:i] and out[i + 1 :] == plan.messages[i + 1 :]
