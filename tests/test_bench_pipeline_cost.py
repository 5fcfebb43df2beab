"""bench/pipeline_cost runs, and its `python` column re-does the work with every count cached."""

from __future__ import annotations

from typing import Any

import pytest

from bench import corpus, pipeline_cost
from proxy.pipeline import compact

needs_corpus = pytest.mark.skipif(not corpus.DEFAULT_DIR.is_dir(), reason="no dev corpus")


@needs_corpus
def test_every_column_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus.setup_environment()
    convs = corpus.load(None)
    counter = corpus.tokenizers().for_model(corpus.MODEL)
    messages, tools, _, _ = pipeline_cost.session(convs, 20_000, counter.count_message)
    body: dict[str, Any] = {"model": corpus.MODEL, "messages": messages, "tools": tools}
    nxt = {**body, "messages": [*messages, pipeline_cost.NEW_TURN]}
    compactions = []
    real = compact.compact_text

    def spy(*args: Any) -> Any:
        compactions.append(args[0])
        return real(*args)

    monkeypatch.setattr("proxy.pipeline.compact_text", spy)
    settings = corpus.settings(context_window=16384)
    t = pipeline_cost.measure(settings, body, nxt, "some text", reps=1)
    assert set(t) == {
        "encode",
        "count",
        "cold",
        "cold1",
        "warm",
        "next",
        "tool",
        "tool1",
        "tenc",
        "python",
    }
    assert all(v > 0 for v in t.values())
    # Stage 1 ran three times per rep on every tool result past its byte bound: cold, cold on
    # one core, and again for `python` (warm and next found them in the memo); the new tool
    # result of the `tool` turn twice (with and without a helper), the others not again.
    _, new_text = pipeline_cost.with_new_tool_result(body)
    assert compactions.count(new_text) == 2
    old = [c for c in compactions if c != new_text]
    assert old and len(old) == 3 * len(set(old))
