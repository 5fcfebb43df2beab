"""A text whose rules spend their work budget is cut head+tail; the request goes on."""

from __future__ import annotations

from proxy.pipeline import Budget, Policy, shrink
from proxy.pipeline.work import WorkExceeded
from tests.pipeline.counters import tik


class Checks:
    """A budget spent after `allowed` checkpoints (deterministic: no clock)."""

    def __init__(self, allowed: int) -> None:
        self.left = allowed

    def check(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise WorkExceeded


def conversation() -> list[dict[str, object]]:
    log = "\n".join(f"step {i}: ok" for i in range(3000)) + "\nERROR: boom at the end"
    return [
        {"role": "system", "content": "you help"},
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": log},
        {"role": "user", "content": "what failed?"},
    ]


def plan(work: object) -> object:
    return shrink(
        conversation(),  # type: ignore[arg-type]
        budget=Budget(window=32768, reserve=1024, margin=0, prompt=30000, clamped=False),
        counter=tik_counter(),
        policy=Policy(),
        memo={},
        work=work,  # type: ignore[arg-type]
    )


class _Tik:
    exact = True
    name = "tik"

    def count_text(self, text: str) -> int:
        return tik(text)

    def count_message(self, message: dict[str, object]) -> int:
        return 4 + sum(tik(v) for v in message.values() if isinstance(v, str))


def tik_counter() -> _Tik:
    return _Tik()


def test_a_spent_budget_cuts_the_text_head_and_tail_and_says_so() -> None:
    normal = plan(lambda chars: Checks(1000))
    spent = plan(lambda chars: Checks(0))
    assert normal.report.actions.get("work_budget") is None  # type: ignore[attr-defined]
    assert spent.report.actions["work_budget"] == 1  # type: ignore[attr-defined]
    text = spent.messages[3]["content"]  # type: ignore[attr-defined]
    assert "omitted by shrink-proxy" in text
    assert text.startswith("step 0: ok") and text.endswith("ERROR: boom at the end")
    assert spent.messages[4] == conversation()[4]  # type: ignore[attr-defined]
    details = [d.detail for d in spent.report.details]  # type: ignore[attr-defined]
    assert any("work budget" in d for d in details)


def test_no_budget_and_a_generous_one_read_alike() -> None:
    assert plan(None).messages == plan(lambda chars: Checks(10_000)).messages  # type: ignore[attr-defined]
