"""Counting ahead: a cold request's long tool results are counted on a spare core while stage 1
reads them. The helper may change when a count is made, never what the plan is."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import pytest

from proxy.ahead import MIN_CHARS, CountAhead
from proxy.settings import Settings
from proxy.shrinker import Shrinker
from proxy.tokenizers import Tokenizers
from proxy.tokens import TokenCounter
from tests.shared_dir import TIKTOKEN_CACHE
from tests.test_tokens import Gated

CACHE_DIR = os.environ.get("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))


def session(results: int, lines: int) -> dict[str, Any]:
    """An agent session with `results` long, distinct tool results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Run the test suite and fix what fails."},
    ]
    for k in range(results):
        call = f"call_{k}"
        out = "".join(
            f"tests/test_m{k}.py::test_case_{i} PASSED [{i % 100:3d}%]\n" for i in range(lines)
        )
        out += f"FAILED tests/test_m{k}.py::test_edge - AssertionError: {k}\n[exit code: 1]"
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": out},
        ]
    messages.append({"role": "user", "content": "What failed?"})
    return {"model": "qwen2.5-coder", "messages": messages}


def shrinker(cores: int, window: int = 16384) -> Shrinker:
    sh = Shrinker(Settings(context_window=window), Tokenizers(cache_dir=CACHE_DIR))
    sh.ahead = CountAhead(cores)
    return sh


@pytest.mark.parametrize("window", [32768, 16384, 8192])
def test_plans_are_the_same_with_and_without_a_helper(window: int) -> None:
    body = session(6, 900)
    alone, helped = shrinker(1, window), shrinker(2, window)
    a, b = alone.plan_sync(body, "auto"), helped.plan_sync(body, "auto")
    assert (alone.ahead.started, helped.ahead.started) == (0, 1)
    assert a.messages == b.messages
    assert a.report == b.report
    assert b.report.actions.get("tools") == 6
    # The same request again is warm: every long text is counted, no helper.
    helped.plan_sync(body, "auto")
    assert helped.ahead.started == 1


def test_no_helper_for_little_new_text_or_an_estimate() -> None:
    sh = shrinker(2)
    small = session(1, 100)
    assert sum(len(m["content"] or "") for m in small["messages"]) < MIN_CHARS
    sh.plan_sync(small, "auto")
    assert sh.ahead.started == 0
    estimate = Shrinker(Settings(context_window=16384), Tokenizers(cache_dir=""))
    estimate.ahead = CountAhead(2)
    estimate.plan_sync(session(6, 900), "auto")
    assert estimate.ahead.started == 0


def test_no_helper_while_every_core_is_planning() -> None:
    counter = Tokenizers(cache_dir=CACHE_DIR).for_model("qwen")
    texts = [m["content"] for m in session(4, 900)["messages"] if m["role"] == "tool"]
    ahead = CountAhead(2)
    with ahead.planning(counter, []), ahead.planning(counter, texts):
        pass  # two plans on two cores: no core to spare
    assert ahead.started == 0
    with ahead.planning(counter, texts):
        pass
    assert ahead.started == 1


def test_the_helper_stops_when_the_plan_is_done() -> None:
    encoding = Tokenizers(cache_dir=CACHE_DIR).for_model("qwen").encoding
    gated = Gated(encoding)
    counter = TokenCounter("cl100k_base", gated)  # type: ignore[arg-type]
    texts = [m["content"] for m in session(3, 900)["messages"] if m["role"] == "tool"]
    ahead = CountAhead(2)
    with ahead.planning(counter, texts):
        assert gated.entered.wait(5)  # the helper is counting the first text
    gated.gate.set()
    deadline = time.monotonic() + 5
    while ahead._busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ahead._busy == 0
    assert gated.calls == 1  # the other two were left to the plan, which no longer needs them
    assert counter.uncounted(texts) == texts[1:]


def test_worker_processes_share_the_cores() -> None:
    cores = os.cpu_count() or 1
    one = Shrinker(Settings(workers=1), Tokenizers(cache_dir=CACHE_DIR))
    many = Shrinker(Settings(workers=cores), Tokenizers(cache_dir=CACHE_DIR))
    assert (one.ahead.cores, many.ahead.cores) == (cores, 1)  # one core each: no helper


class FailsInHelper:
    """The real encoding, except that it raises in the count-ahead helper's thread."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding

    def encode_ordinary(self, text: str) -> list[int]:
        if threading.current_thread().name.startswith("shrink-count-ahead"):
            raise RuntimeError("helper encoder failed")
        return list(self.encoding.encode_ordinary(text))


def test_a_failing_helper_is_logged_and_the_plan_counts_itself(caplog) -> None:
    body = session(4, 900)
    reference = shrinker(1).plan_sync(body, "auto")
    sh = shrinker(2)
    model = body["model"]
    real = sh.tokenizers.for_model(model)
    failing = TokenCounter(real.name, FailsInHelper(real.encoding))  # type: ignore[arg-type]
    sh.tokenizers.for_model = lambda _model: failing  # type: ignore[method-assign]
    started: list[int] = []
    sh.ahead = CountAhead(2, on_start=lambda: started.append(1))
    with caplog.at_level(logging.WARNING, logger="proxy.ahead"):
        plan = sh.plan_sync(body, "auto")
        deadline = time.monotonic() + 5
        while sh.ahead._busy and time.monotonic() < deadline:
            time.sleep(0.01)
    assert (sh.ahead.started, sh.ahead.failed, started) == (1, 1, [1])
    assert plan.messages == reference.messages and plan.report == reference.report
    assert "counting ahead failed" in caplog.text and "helper encoder failed" in caplog.text
