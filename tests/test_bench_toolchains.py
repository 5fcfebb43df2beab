"""bench/toolchains' trimmed section: its conversations really drop the log, and it scores them."""

from __future__ import annotations

import pytest

from bench import corpus, toolchains
from proxy.shrinker import Shrinker
from tests.pipeline.ecosystems import logs


@pytest.mark.parametrize("window", toolchains.TRIM_WINDOWS)
def test_each_log_is_dropped_and_its_needles_listed_under_the_marker(window: int) -> None:
    shrinker = Shrinker(corpus.settings(context_window=window), corpus.tokenizers())
    for log in logs(0):
        messages = toolchains.trimmed_conversation(log, window, 0)
        plan = shrinker.plan_sync({"model": corpus.MODEL, "messages": messages}, "auto")
        assert not any(m.get("tool_call_id") == "call_0" for m in plan.messages), log.name
        assert plan.messages[-1] == messages[-1]  # the question survives
        hay = " ".join(corpus.haystack(plan.messages).split())
        assert all(" ".join(n.split()) in hay for n in log.needles), log.name


def test_the_report_counts_kept_needles_per_window(capsys: pytest.CaptureFixture[str]) -> None:
    toolchains.trimmed([(0, log) for log in logs(0)])
    rows = capsys.readouterr().out.splitlines()[-2:]
    total = sum(len(log.needles) for log in logs(0))
    for window, line in zip(toolchains.TRIM_WINDOWS, rows, strict=True):
        assert line.split()[:3] == [
            str(window),
            f"{total}/{total}",
            f"{len(logs(0))}/{len(logs(0))}",
        ]
