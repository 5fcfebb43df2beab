"""Small windows: a moved cut keeps a fair share of the budget, and the facts a useful minimum.

At 4k the defaults that suit 8k and 16k (a move leaves 0.8 of the budget free; the facts take a
80th of the window) cut one session from 2,721 to 587 tokens of a 2,781-token budget and listed
51 tokens of facts: the version chosen at the first step was lost. `trim_keep_tokens` and
`facts_min_tokens` are floors that bind below 8k only.
"""

from __future__ import annotations

import os

import pytest

from proxy.pipeline import Policy, compute_budget, facts_room, shrink
from proxy.pipeline.types import Message
from proxy.tokenizers import Tokenizers

COUNTER = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen")
SYSTEM = (
    "You are a coding agent working in a Python repository. Run one shell command at a time "
    "with the `run` tool, read its output, and explain what you changed. " * 6
)


def session(steps: int) -> list[Message]:
    """An agent's session: the user pins a version at step 0, then asks for checks; each
    step one command and its output (a pip install, then test runs of about 150 tokens)."""
    out: list[Message] = [{"role": "system", "content": SYSTEM}]
    for k in range(steps):
        ask = "Pin requests to 2.31.0 and install it." if k == 0 else f"Now run check {k}."
        out.append({"role": "user", "content": ask})
        command = "pip install requests==2.31.0" if k == 0 else f"pytest tests/test_c{k}.py -q"
        call = {"id": f"c{k}", "type": "function"}
        call["function"] = {"name": "run", "arguments": f'{{"cmd": "{command}"}}'}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        if k == 0:
            result = "Collecting requests==2.31.0\n" + "  Downloading ...\n" * 8
            result += "Successfully installed requests-2.31.0 urllib3-2.0.7 idna-3.6"
        else:
            lines = [f"tests/test_c{k}.py::test_case_{i} PASSED" for i in range(12)]
            result = "\n".join(lines) + f"\n12 passed in 0.{k:02d}s"
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": result})
        out.append({"role": "assistant", "content": f"Check {k} is done; everything passed."})
    out.append({"role": "user", "content": "Which version of requests did we pin at the start?"})
    return out


def budget(window: int):  # type: ignore[no-untyped-def]
    return compute_budget(window, None, default_reserve=4096, floor=1024, margin_share=0.03)


def test_the_facts_get_a_useful_minimum_on_small_windows() -> None:
    policy = Policy()
    assert facts_room(policy, 4096) == 100  # a share alone: 51
    assert facts_room(policy, 8192) == 102  # unchanged: the share is above the floor
    assert facts_room(policy, 16384) == 204
    assert facts_room(Policy(facts_tokens=60), 4096) == 60  # never more than asked
    assert facts_room(Policy(facts_tokens=0), 4096) == 0


def test_the_floor_binds_below_8k_only() -> None:
    policy = Policy()
    for window in (8192, 16384, 32768):
        room = budget(window).prompt
        assert policy.trim_target(room) == room - int(policy.trim_step * room)
    room = budget(4096).prompt
    assert policy.trim_target(room) == 1024  # the step alone: 590
    assert Policy().trim_target(1500) == 750  # at most half the budget


@pytest.mark.parametrize("steps", [14, 18, 22])
def test_after_a_cut_a_small_budget_is_not_left_mostly_empty(steps: int) -> None:
    """The turn-14 shape: every turn of the session replayed at 4k; a turn that trims keeps at
    least a third of the budget (a move kept a fifth), and the facts under the marker hold more
    than a share of 4k would allow."""
    b = budget(4096)
    messages = session(steps)
    fills = []
    for end in range(2, len(messages) + 1):
        if messages[end - 1]["role"] not in ("user", "tool"):
            continue
        plan = shrink(messages[:end], budget=b, counter=COUNTER, policy=Policy())
        if "trim" in plan.report.actions:
            fills.append(plan.report.tokens_after / b.prompt)
    assert fills, "the session never trimmed: make it longer"
    assert min(fills) >= 1 / 3, [f"{f:.0%}" for f in fills]
    final = shrink(messages, budget=b, counter=COUNTER, policy=Policy())
    marker = next(m["content"] for m in final.messages if "omitted to fit" in str(m["content"]))
    facts = marker.split("\n", 1)[1]
    # A share of 4k listed 4 lines in 53 tokens; the floor's 100 hold twice as many.
    assert marker.count("\n- ") >= 8 and COUNTER.count_text(facts) > 80, facts
