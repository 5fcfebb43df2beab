"""bench/captured: its data is whole, and stage 1 beats a budget-matched cut on it."""

from __future__ import annotations

from bench import captured


def test_every_needle_is_in_its_captured_output() -> None:
    outputs = captured.load()
    assert len(outputs) == 30
    for case, text in outputs:
        assert any(n["class"] == "critical" for n in case["needles"]), case["id"]
        for needle in case["needles"]:
            assert needle["class"] in captured.CLASSES
            assert needle["answer"] in text, (case["id"], needle["answer"])
        assert "/tmp/s11/" not in text and "/root/" not in text  # scrubbed to /home/user


def test_stage_1_keeps_more_critical_lines_than_head_and_tail() -> None:
    kept, lost = captured.score(captured.load())
    for budget in captured.BUDGETS:
        ours, cut = kept[f"{budget} ours"], kept[f"{budget} head+tail"]
        assert ours["critical"] > cut["critical"], budget
        lost_here = sum(f"@{budget}:" in line for line in lost)
        assert ours["critical"] + lost_here == kept["total"]["critical"]
