"""The pipeline's invariants (tests/pipeline/test_pipeline_invariants.py) on generated
Responses `input` items, plus: reasoning, compaction and unknown items byte-identical, calls
never edited, and every call kept with its output (by call_id)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.pipeline import Policy, compute_budget, shrink
from proxy.pipeline.responses import RESPONSES
from proxy.tokenizers import Tokenizers
from proxy.tokens import ShapedCounter

COUNTER = ShapedCounter(
    Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen"), RESPONSES
)
WHOLE = ("reasoning", "compaction", "web_search_call", "mcp_call")
CALLS = ("function_call", "custom_tool_call", "local_shell_call")

words = st.sampled_from(
    ["error", "ok", "PASSED", "test_x.py", "::", "42", "line", "warning:", "{", "}", "\n", "  "]
)
text = st.lists(words, min_size=0, max_size=400).map(" ".join)
big = st.tuples(text, st.integers(1, 12)).map(lambda p: p[0] * p[1])


def message(role: str, content: str, parts: bool) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {
        "type": "message",
        "role": role,
        "content": [{"type": kind, "text": content}] if parts else content,
    }


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    items = [message("developer", draw(big), draw(st.booleans()))]
    n = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "response", "unknown", "orphan"]))
        if kind == "response":
            if draw(st.booleans()):
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{n}",
                        "summary": [],
                        "encrypted_content": "e" * draw(st.integers(1, 400)),
                    }
                )
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                call_kind = draw(st.sampled_from(CALLS))
                calls.append((call_kind, f"c{n}"))
                items.append(
                    {"type": call_kind, "call_id": f"c{n}", "name": "run", "arguments": "{}"}
                )
            for call_kind, cid in calls:
                output: Any = draw(big)
                if draw(st.integers(0, 3)) == 0:
                    output = [{"type": "input_text", "text": output}]
                items.append({"type": f"{call_kind}_output", "call_id": cid, "output": output})
        elif kind == "unknown":
            items.append(
                {"type": draw(st.sampled_from(WHOLE[1:])), "id": f"x{n}", "data": draw(text)}
            )
        elif kind == "orphan":
            items.append({"type": "function_call_output", "call_id": "ghost", "output": draw(text)})
        else:
            items.append(message(kind, draw(big), draw(st.booleans())))
    items.append({"role": "user", "content": draw(big)})
    return items


def run(items: list[Any], window: int, policy: Policy) -> Any:
    budget = compute_budget(window, None, default_reserve=256, floor=128, margin_share=0.02)
    return budget, shrink(items, budget=budget, counter=COUNTER, policy=policy, dialect=RESPONSES)


def calls_of(items: list[Any]) -> set[str]:
    return {i["call_id"] for i in items if i.get("type") in CALLS}


def outputs_of(items: list[Any]) -> set[str]:
    return {i["call_id"] for i in items if str(i.get("type")).endswith("_output")}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=conversations(),
    window=st.integers(300, 2500),
    tool_max=st.sampled_from([64, 128, 512]),
    keep_last=st.integers(0, 6),
    cut_user=st.booleans(),
)
def test_invariants(items: Any, window: int, tool_max: int, keep_last: int, cut_user: bool) -> None:
    policy = Policy(tool_max_tokens=tool_max, keep_last=keep_last, cut_latest_user=cut_user)
    before = orjson.dumps(items)
    budget, plan = run(items, window, policy)
    out, rep = plan.messages, plan.report
    assert orjson.dumps(items) == before  # the input is never mutated
    assert rep.tokens_after <= rep.tokens_before
    if "user_cut" not in rep.actions:
        assert out[-1] == items[-1]
    else:
        assert cut_user and out[-1] != items[-1]
        strict = dataclasses.replace(policy, cut_latest_user=False)
        assert not run(items, window, strict)[1].report.fits
    assert out[0] == items[0]  # the pinned developer message
    # Sealed and unknown items, and calls, are byte-identical to ones that came in.
    sent = {orjson.dumps(i) for i in items}
    for i in out:
        if i.get("type") in WHOLE or i.get("type") in CALLS:
            assert orjson.dumps(i) in sent
    # Every kept call keeps its output, every kept output (of a call) its call.
    paired = calls_of(items) & outputs_of(items)
    assert calls_of(out) & paired == outputs_of(out) & paired
    total = sum(COUNTER.count_message(m) for m in out) + 3
    assert total == rep.tokens_after
    if rep.fits:
        assert total <= budget.prompt
    assert run(items, window, policy)[1].messages == out
    again = run(out, window, policy)[1]
    if rep.fits:
        assert again.messages == out and not again.changed


@settings(max_examples=40, deadline=None)
@given(items=conversations())
def test_under_budget_without_big_outputs_is_untouched(items: Any) -> None:
    _, plan = run(items, 10_000_000, Policy(tool_max_tokens=100_000))
    assert not plan.changed and plan.messages is items
