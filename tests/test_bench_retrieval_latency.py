"""bench.retrieval_latency runs on every API that has the loop (one run each, events 1 ms
apart): it asserts the scripted model called the tool, so a loop that stopped serving fails."""

from __future__ import annotations

import pytest

from bench.retrieval_latency import main


def test_it_runs_on_every_api(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--runs", "1", "--chunk-ms", "1"])
    out = capsys.readouterr().out
    for api in ("chat", "messages", "responses"):
        assert f"== {api} (" in out
    assert out.count("one retrieval round adds") == 3
