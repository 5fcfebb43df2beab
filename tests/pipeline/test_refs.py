"""Refs: every elision names the hash of its original, and the plan carries the originals.

Stage 1 ends each compacted tool result with a footer naming the ref of the whole text; stage
2's marker names the ref of the dropped span as sent. Refs are pure functions of the content,
so markers repeat byte for byte while the cut stays; every ref the shrunk messages name is one
the plan can hand to the store; nothing elided is lost (it is shown, or behind a ref).
"""

from __future__ import annotations

import dataclasses
import os

from hypothesis import HealthCheck, given, settings

from proxy.pipeline import Policy, compute_budget, shrink
from proxy.pipeline.refs import refs_in, span_ref, text_ref
from proxy.pipeline.summary import apply_summary, full_transcript, marker_position
from proxy.tokenizers import Tokenizers
from tests.pipeline.test_pipeline_invariants import conversations

COUNTER = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen")
POLICY = Policy(retrieve=True)


def budget(window: int):
    return compute_budget(window, None, default_reserve=256, floor=128, margin_share=0.02)


def plan(messages, window=8192, policy=POLICY, memo=None):
    return shrink(messages, budget=budget(window), counter=COUNTER, policy=policy, memo=memo)


def log(n: int, tag: str = "") -> str:
    return "\n".join(f"{tag}step {i}: compiling module_{i} ... ok" for i in range(n))


def agent(turns: int, lines: int = 300) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"task {t}: build it"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "sh", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": log(lines, f"t{t} ")})
        messages.append({"role": "assistant", "content": f"turn {t} built"})
    messages.append({"role": "user", "content": "what failed?"})
    return messages


def texts(messages) -> list[str]:
    return [m["content"] for m in messages if isinstance(m.get("content"), str)]


def test_a_compacted_result_names_the_ref_of_its_original_and_stays_within_the_limit():
    original = log(2000)
    messages = [
        {"role": "user", "content": "build"},
        {"role": "tool", "tool_call_id": "x", "content": original},
        {"role": "user", "content": "and?"},
    ]
    p = plan(messages, window=32768)
    out = p.messages[1]["content"]
    ref = text_ref(original)
    assert out.endswith(f"Retrieve more: hash={ref} ...]")
    assert "2,000 lines" in out.splitlines()[-1]
    assert p.refs == {ref: original}
    assert COUNTER.count_text(out) <= POLICY.tool_limit(32768)
    # Off: the marker words of before, and no refs.
    off = plan(messages, window=32768, policy=Policy())
    assert "hash=" not in off.messages[1]["content"] and off.refs == {}


def test_a_dropped_span_is_named_in_the_marker_and_kept_as_sent():
    messages = agent(40)
    p = plan(messages, window=4096)
    i = marker_position(p.messages)
    assert i is not None
    marker = p.messages[i]["content"]
    named = refs_in(marker.splitlines()[0])
    assert len(named) == 1 and p.span_ref == named[0]
    span = p.refs[named[0]]
    assert isinstance(span, list) and span == messages[1 : 1 + len(span)]
    assert span[0] is messages[1]  # the client's messages, before stage 1 compacted them
    # The summary that may replace the marker still names the span.
    summarised = apply_summary(
        p.messages, i, "[shrink-proxy: summary]\nnote", "user", ref=p.span_ref
    )
    assert f"hash={p.span_ref}" in summarised[i]["content"]


def test_refs_are_pure_functions_of_the_content():
    messages = agent(40)
    a, b = plan(messages, window=4096), plan(list(messages), window=4096)
    assert a.messages == b.messages and list(a.refs) == list(b.refs)
    # One more turn, same cut: the marker is byte for byte the same (prefix caches survive).
    memo: dict = {}
    first = plan(messages, window=6144, memo=memo)
    longer = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
    second = plan(longer, window=6144, memo=memo)
    i = marker_position(first.messages)
    assert i is not None and first.messages[: i + 1] == second.messages[: i + 1]


def test_span_refs_name_what_precedes_the_span_too():
    chain_a = [bytes([n]) * 16 for n in range(5)]
    chain_b = [b"\xff" * 16, *chain_a[1:]]
    assert span_ref(chain_a, 1, 3) != span_ref(chain_a, 1, 4)
    assert span_ref(chain_a, 0, 3) != span_ref(chain_b, 0, 3)


@given(conversations())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_nothing_elided_is_lost_and_every_named_ref_is_kept(msgs):
    for window in (1024, 4096):
        p = plan(msgs, window=window, policy=dataclasses.replace(POLICY, keep_last=2))
        if not p.changed:
            assert p.refs == {}
            continue
        shown = "\n".join(texts(p.messages))
        named = set(refs_in(shown))
        # Every ref the messages name can be served (stage 3 may cut a footer's middle away,
        # never invent one, and names the text it cut instead).
        assert named <= set(p.refs)
        kept = "\n".join(v if isinstance(v, str) else full_transcript(v) for v in p.refs.values())
        for m in msgs:
            content = m.get("content")
            if m.get("role") in ("tool", "user") and isinstance(content, str):
                assert content.strip() in shown or content.strip() in kept


def test_a_latest_user_message_cut_by_stage_3_names_its_whole():
    """`cat big.log | llm "summarise"`: the message alone does not fit, so its middle goes; the
    marker names the hash of the whole, which the plan keeps."""
    big = log(4000, "u ")
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": big}]
    p = plan(msgs, window=2048)
    assert "truncate" in p.report.actions
    (cut,) = [m["content"] for m in p.messages if m["role"] == "user"]
    (ref,) = refs_in(cut)
    assert f"omitted by shrink-proxy. Retrieve more: hash={ref} ...]" in cut
    assert ref == text_ref(big) and p.refs[ref] == big
    assert p.report.tokens_after <= p.report.budget
    off = plan(msgs, window=2048, policy=Policy())
    (plain,) = [m["content"] for m in off.messages if m["role"] == "user"]
    assert "hash=" not in plain and off.refs == {}
