"""bench/overhead's per-chunk figures, from rows shaped like a run's (no servers needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.overhead.report import print_summary


def row(target: str, cpu_us: float, chunks: float | None) -> dict[str, Any]:
    return {"target": target, "cpu_per_req_us": cpu_us, "chunks_per_resp": chunks}


def scenario(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "concurrency": 1, "targets": rows, "ratios": {}}


def test_one_more_chunk_is_the_cpu_difference_per_extra_chunk(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Per stream: the proxy costs 400 us + 30 us per chunk over JSON's 500 us.
    out: dict[str, Any] = {
        "scenarios": [
            scenario("small-json", [row("proxy", 500, None), row("litellm", 9000, None)]),
            scenario(
                "small-sse-paced",
                [row("proxy", 500 + 400 + 30 * 21, 21), row("litellm", 20000, 22)],
            ),
            # LiteLLM's long stream came back as short as the other: no figure, not a division
            # by zero (it does not pass x-bench-chunks on).
            scenario(
                "small-sse-paced-long",
                [
                    row("proxy", 500 + 400 + 30 * 101, 101),
                    row("litellm", 20100, 22),
                    row("direct (A/A)", 1, 101),
                ],
            ),
        ]
    }
    print_summary(SimpleNamespace(out=out), "floor")  # type: ignore[arg-type]
    assert out["slope_cpu_per_chunk_us"] == {"proxy": pytest.approx(30.0)}
    # The older figure spreads the per-stream 400 us over the 21 chunks.
    assert out["marginal_cpu_per_chunk_us"]["proxy"]["c1"] == pytest.approx(30 + 400 / 21)
    assert "one more streamed chunk" in capsys.readouterr().out


def test_without_the_long_stream_there_is_no_slope() -> None:
    out: dict[str, Any] = {
        "scenarios": [
            scenario("small-json", [row("proxy", 500, None)]),
            scenario("small-sse-paced", [row("proxy", 1500, 21)]),
        ]
    }
    print_summary(SimpleNamespace(out=out), "floor")  # type: ignore[arg-type]
    assert "slope_cpu_per_chunk_us" not in out
