"""Invariants of the whole pipeline (stage 1 + 2 + 3) on generated conversations.

Never grows; latest user message verbatim (cut, marked, only when it alone cannot fit); pinned
system messages first and unchanged; no orphaned tool call or result; fits whenever feasible;
untouched when under budget; deterministic; a second run changes nothing.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.pipeline import Policy, compute_budget, shrink
from proxy.tokenizers import Tokenizers

COUNTER = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen")

words = st.sampled_from(
    ["error", "ok", "PASSED", "test_x.py", "::", "42", "line", "warning:", "{", "}", "\n", "  "]
)
text = st.lists(words, min_size=0, max_size=400).map(" ".join)
# Repetition makes large texts cheaply, so stage 1 and stage 3 are exercised often.
big = st.tuples(text, st.integers(1, 12)).map(lambda p: p[0] * p[1])


@st.composite
def conversations(draw):
    msgs = [{"role": "system", "content": draw(big)}]
    if draw(st.booleans()):
        msgs.append({"role": "developer", "content": "be brief"})
    n = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "orphan"]))
        if kind == "tools":
            k = draw(st.integers(1, 3))
            ids = [f"c{n}_{i}" for i in range(k)]
            n += 1
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(st.none() | text),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "run", "arguments": "{}"},
                        }
                        for i in ids
                    ],
                }
            )
            for i in ids:
                msgs.append({"role": "tool", "tool_call_id": i, "content": draw(big)})
        elif kind == "orphan":
            msgs.append({"role": "tool", "tool_call_id": "ghost", "content": draw(text)})
        else:
            content = draw(big)
            if draw(st.integers(0, 5)) == 0:
                content = [
                    {"type": "text", "text": content},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ]
            msgs.append({"role": kind, "content": content})
    msgs.append({"role": "user", "content": draw(big)})
    return msgs


def run(msgs, window, policy):
    budget = compute_budget(window, None, default_reserve=256, floor=128, margin_share=0.02)
    return budget, shrink(msgs, budget=budget, counter=COUNTER, policy=policy)


def ids_of_calls(msgs):
    return {tc["id"] for m in msgs for tc in m.get("tool_calls") or []}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=conversations(),
    window=st.integers(300, 4000),
    tool_max=st.sampled_from([64, 128, 512]),
    keep_last=st.integers(0, 6),
    step=st.sampled_from([0.25, 0.5, 0.75]),
    cut_user=st.booleans(),
)
def test_invariants(msgs, window, tool_max, keep_last, step, cut_user):
    policy = Policy(
        tool_max_tokens=tool_max, keep_last=keep_last, trim_step=step, cut_latest_user=cut_user
    )
    budget, plan = run(msgs, window, policy)
    out, rep = plan.messages, plan.report
    # Never grows.
    assert rep.tokens_after <= rep.tokens_before
    # The latest user message is there, verbatim, and last; or, only when the request could
    # not fit otherwise, cut in its middle with the marker.
    if "user_cut" not in rep.actions:
        assert out[-1] == msgs[-1]
    else:
        assert cut_user and out[-1]["role"] == "user" and out[-1] != msgs[-1]
        assert "omitted by shrink-proxy" in str(out[-1]["content"])
        strict = dataclasses.replace(policy, cut_latest_user=False)
        assert not run(msgs, window, strict)[1].report.fits
    # Pinned system/developer messages stay first, in order and verbatim, even in the last resort.
    pinned = [m for m in msgs[:2] if m["role"] in ("system", "developer")]
    assert out[: len(pinned)] == pinned
    # No tool result without its call; no call (of the input's paired ones) without its results.
    original_results = {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
    kept_calls = ids_of_calls(out)
    for m in out:
        if m["role"] == "tool" and m["tool_call_id"] in ids_of_calls(msgs):
            assert m["tool_call_id"] in kept_calls
    kept_results = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    for cid in kept_calls:
        if cid in original_results:
            assert cid in kept_results
    # Fits whenever the report says so, and the report's count is the truth.
    total = sum(COUNTER.count_message(m) for m in out) + 3
    assert total == rep.tokens_after
    if rep.fits:
        assert total <= budget.prompt
    # Deterministic, and idempotent.
    assert run(msgs, window, policy)[1].messages == out
    again = run(out, window, policy)[1]
    if rep.fits:
        assert again.messages == out
        assert not again.changed


@settings(max_examples=60, deadline=None)
@given(msgs=conversations())
def test_under_budget_without_big_tool_results_is_untouched(msgs):
    policy = Policy(tool_max_tokens=100_000)
    budget, plan = run(msgs, 10_000_000, policy)
    assert not plan.changed
    assert plan.messages is msgs
    assert plan.report.actions_header == "none"


def test_mode_off_changes_nothing():
    msgs = [{"role": "user", "content": "x " * 5000}]
    budget = compute_budget(1024, None, default_reserve=256, floor=128, margin_share=0.02)
    plan = shrink(msgs, budget=budget, counter=COUNTER, policy=Policy(), mode="off")
    assert plan.messages is msgs and not plan.changed
    assert not plan.report.fits


@pytest.mark.parametrize(
    ("window", "requested", "prompt", "clamped"),
    [
        (32768, None, 32768 - 4096 - 984, False),
        (8192, None, 8192 - 2048 - 246, False),
        (8192, 8000, 1024, True),
        (8192, 1000, 8192 - 1000 - 246, False),
    ],
)
def test_budget(window, requested, prompt, clamped):
    b = compute_budget(window, requested, default_reserve=4096, floor=1024, margin_share=0.03)
    assert (b.prompt, b.clamped) == (prompt, clamped)


def test_compact_mode_exposes_the_dropped_span_and_leaves_summary_room():
    msgs = [{"role": "system", "content": "sys"}]
    for t in range(30):
        msgs.append({"role": "user", "content": f"question {t} " + "lorem ipsum " * 40})
        msgs.append({"role": "assistant", "content": f"answer {t} " + "dolor sit " * 40})
    msgs.append({"role": "user", "content": "last"})
    budget = compute_budget(4096, 512, default_reserve=256, floor=128, margin_share=0.02)
    plan = shrink(
        msgs, budget=budget, counter=COUNTER, policy=Policy(summary_tokens=600), mode="compact"
    )
    assert plan.changed and plan.marker_index == 1
    marker = plan.messages[1]
    assert marker["role"] == "system" and "omitted" in marker["content"]
    # The span is exactly what was cut away, in order; the kept part resumes right after it,
    # behind the span's last user message when that had to be carried across the cut.
    cut = 1 + len(plan.span)
    assert plan.span == msgs[1:cut]
    rest = plan.messages[2:]
    if msgs[cut]["role"] != "user":
        assert rest[0] is plan.span[-1] and rest[0]["role"] == "user"
        rest = rest[1:]
    assert rest == msgs[cut:]
    assert plan.report.tokens_after + 600 - COUNTER.count_message(marker) <= budget.prompt


def test_trim_marker_lists_the_dropped_spans_key_lines():
    msgs = [{"role": "system", "content": "sys"}]
    for t in range(30):
        msgs.append({"role": "user", "content": f"run step {t} " + "please " * 60})
        msgs.append({"role": "assistant", "content": f"ran {t} " + "done " * 60})
    msgs[5]["content"] += "\nERROR: No matching distribution found for requests==2.99.0"
    msgs.append({"role": "user", "content": "what failed?"})
    budget = compute_budget(4096, 512, default_reserve=256, floor=128, margin_share=0.02)
    policy = Policy(facts_tokens=200)
    plan = shrink(msgs, budget=budget, counter=COUNTER, policy=policy)
    marker = plan.messages[plan.marker_index]["content"]
    assert (
        "omitted" in marker
        and "ERROR: No matching distribution found for requests==2.99.0" in marker
    )
    assert plan.report.actions["facts"] >= 1
    assert COUNTER.count_text(marker.split("\n", 1)[1]) <= 200
    assert plan.report.fits
    # Deterministic, and a second pass changes nothing.
    assert shrink(msgs, budget=budget, counter=COUNTER, policy=policy).messages == plan.messages
    assert not shrink(plan.messages, budget=budget, counter=COUNTER, policy=policy).changed
    off = shrink(msgs, budget=budget, counter=COUNTER, policy=Policy(facts_tokens=0))
    assert "\n" not in off.messages[off.marker_index]["content"]
