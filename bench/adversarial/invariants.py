"""What a plan must satisfy whatever the input: the pipeline's own promises, checked on its output.

The same properties tests/pipeline/test_pipeline_invariants.py draws from generated
conversations, here on hostile ones at full size: never grows; the latest user message (unless it
alone cannot fit: then cut with the marker, `user_cut`) and the pinned system/developer messages
come out identical; every kept tool result still follows its call; the last `keep_last` messages
stay (compacted, perhaps, never dropped); the request fits whenever its untouchable part does; the
output serialises; the client's body is not mutated.
Determinism needs a second process and is checked by the runner.
"""

from __future__ import annotations

from typing import Any

import orjson

from bench.corpus import pairing_ok
from proxy.pipeline import Plan
from proxy.pipeline.units import group_units, pinned_count
from proxy.tokens import REPLY_PRIMING, TokenCounter

# Room a trim marker with its facts may need beside the pinned and latest user messages.
MARKER_SLACK = 512


def _bare(m: Any) -> Any:
    """`m` with every text emptied: what no cut of stage 3 can take from it (ids, calls)."""
    if not isinstance(m, dict):
        return m
    content = m.get("content")
    if isinstance(content, str):
        return {**m, "content": ""}
    if isinstance(content, list):
        return {**m, "content": [{"type": "text", "text": ""}]}
    return m


def _keepable(before: list[Any], k: int, counter: TokenCounter, budget: int, tools: Any) -> bool:
    """Whether the last `k` messages could be kept at all: the units holding them, their texts
    all cut away, fit beside the pinned messages and the tools. Past that the pipeline drops
    the oldest of them, as the README says (a call whose ids alone outgrow the window)."""
    p = pinned_count(before)
    first = max(p, len(before) - k)
    start = next((b for b, e in group_units(before, p) if b <= first < e), first)
    floor = counter.count_tools(tools) + REPLY_PRIMING
    floor += sum(counter.count_message(m) for m in before[:p])
    floor += sum(counter.count_message(_bare(m)) for m in before[start:])
    return floor <= budget


def _last_user(messages: list[Any]) -> Any:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return m
    return None


def _shape(m: Any) -> tuple[Any, ...]:
    """What identifies a message besides its text: role, the call it answers, the calls it makes."""
    if not isinstance(m, dict):
        return (None,)
    calls = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else []
    ids = tuple(c.get("id") for c in calls if isinstance(c, dict))
    return (m.get("role"), m.get("tool_call_id"), ids)


def check(
    body: dict[str, Any], raw: bytes, plan: Plan, counter: TokenCounter, keep_last: int
) -> dict[str, str]:
    """name -> what went wrong, for each invariant the plan breaks (empty: all hold)."""
    failed: dict[str, str] = {}
    before: list[Any] = body["messages"]
    out = plan.messages
    report = plan.report
    if report.tokens_after > report.tokens_before:
        failed["grew"] = f"{report.tokens_before} -> {report.tokens_after} tokens"
    user = _last_user(before)
    if user is not None and "user_cut" in report.actions:
        if "omitted by shrink-proxy" not in str((_last_user(out) or {}).get("content")):
            failed["latest-user"] = "the latest user message was cut without a marker"
    elif user is not None and _last_user(out) != user:
        failed["latest-user"] = "the latest user message is changed or missing"
    p = pinned_count(before)
    if out[:p] != before[:p]:
        failed["pinned"] = f"the {p} leading system/developer messages changed"
    if pairing_ok(before) and not pairing_ok(out):
        failed["pairing"] = "a tool result lost its call, or a call its results"
    k = min(keep_last, len(before))
    if (
        k
        and [_shape(m) for m in out[-k:]] != [_shape(m) for m in before[-k:]]
        and _keepable(before, k, counter, report.budget, body.get("tools"))
    ):
        failed["keep-last"] = f"the last {k} messages are not all kept"
    try:
        orjson.dumps(out)
    except (TypeError, orjson.JSONEncodeError) as e:
        failed["orjson"] = f"{type(e).__name__}: {e}"[:200]
    fixed = counter.count_tools(body.get("tools"))
    total = counter.count_messages(out) + fixed
    floor = fixed + REPLY_PRIMING + MARKER_SLACK
    floor += sum(counter.count_message(m) for m in before[:p])
    floor += counter.count_message(user) if user is not None else 0
    if report.fits and total > report.budget:
        failed["fits"] = f"reported fitting, but {total:,} > budget {report.budget:,}"
    elif not report.fits and floor <= report.budget:
        failed["fits"] = f"{report.tokens_after:,} > budget {report.budget:,} (could fit)"
    try:
        untouched = orjson.dumps(body) == raw
    except (TypeError, orjson.JSONEncodeError):
        untouched = False
    if not untouched:
        failed["untouched"] = "the client's parsed body was mutated"
    return failed
