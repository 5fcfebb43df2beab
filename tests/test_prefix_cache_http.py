"""Showing the cache working: what backends report of their prefix cache, cut moves, and
calibration changes, in the log line, /metrics and /stats (issue 21, item 8).

The fake upstream reports cached tokens as OpenAI and vLLM do (`x-fake-cached`) or llama.cpp's
`timings` (`x-fake-timings`); tests/e2e/test_llamacpp.py checks the real llama.cpp server.
"""

from __future__ import annotations

import logging

import httpx
import openai
import pytest

from tests.test_numbers_http import metric, request_lines, wait_for_requests
from tests.test_windows_http import convo

MODEL = "fake-model"


def chat(url: str, messages: list[dict], **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 64}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers)


def test_cached_tokens_reach_the_log_line_metrics_and_stats(proxy_url, caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    r = chat(proxy_url, convo(2), **{"x-fake-cached": "100"})
    prompt = r.json()["usage"]["prompt_tokens"]
    line = request_lines(caplog)[-1]
    assert line["cached_tokens"] == 100 and line["upstream_prompt_tokens"] == prompt
    # A stream, through the real SDK, with llama.cpp's timings in its usage chunk.
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0) as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=convo(2),  # type: ignore[arg-type]
            stream=True,
            extra_headers={"x-fake-timings": "90,10"},
        )
        chunks = list(stream)
    assert all(c.usage is None for c in chunks)  # the usage chunk the proxy asked for is hidden
    s = wait_for_requests(proxy_url, 2)
    line = request_lines(caplog)[-1]
    assert (line["cache_n"], line["prompt_n"]) == (90, 10)

    text = httpx.get(f"{proxy_url}/metrics").text
    assert metric(text, "shrink_upstream_cached_tokens_total", model=MODEL) == 100 + 90
    assert metric(text, "shrink_upstream_cache_prompt_tokens_total", model=MODEL) == prompt + 100
    assert metric(text, "shrink_upstream_cache_reports_total", model=MODEL) == 2
    (row,) = s["prefix_cache"]["by_model"]
    assert row["model"] == MODEL and row["cached_tokens"] == 190 and row["requests"] == 2
    assert row["reuse_pct"] == round(100 * 190 / (prompt + 100), 2)
    series = s["prefix_cache"]["series"]["by_model"][MODEL]
    assert sum(p[1] for p in series) == prompt + 100 and sum(p[2] for p in series) == 190
    assert (s["recent"][0]["prefix_reuse"], s["recent"][1]["prefix_reuse"]) == (
        [100, 90],
        [prompt, 100],
    )


def test_a_backend_that_reports_no_cache_adds_no_reuse(proxy_url, caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    chat(proxy_url, convo(2))
    assert not {"cached_tokens", "cache_n", "prompt_n"} & set(request_lines(caplog)[-1])
    s = wait_for_requests(proxy_url, 1)
    assert s["prefix_cache"]["by_model"] == [] and s["recent"][0]["prefix_reuse"] is None
    text = httpx.get(f"{proxy_url}/metrics").text
    assert metric(text, "shrink_upstream_cache_reports_total") == 0


def test_cut_moves_count_a_conversation_whose_cut_moved(start_proxy):
    """A growing conversation: the first trim moves the cut from nothing to somewhere (the
    backend rebuilds its cache from there); the sticky cut then stays put for a turn; another
    conversation has a root of its own."""
    url = start_proxy(context_window=4096)
    short, long, longer = convo(4), convo(16), convo(17)
    cuts = []
    for messages in (short, long, longer):
        r = chat(url, messages)
        assert r.status_code == 200
        cuts.append(r.headers["x-shrink-actions"])
    assert "trim" not in cuts[0] and "trim" in cuts[1] and "trim" in cuts[2]
    other = [{"role": "system", "content": "Another agent."}, *convo(16)[1:]]
    assert "trim" in chat(url, other).headers["x-shrink-actions"]
    text = httpx.get(f"{url}/metrics").text
    assert metric(text, "shrink_cut_moves_total", model=MODEL) == 1
    assert httpx.get(f"{url}/stats").json()["totals"]["cut_moves"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_calibration_changes_are_counted(start_proxy, stream):
    """The fake counts a prompt as its bytes / 4, not as tiktoken does: after the calibration's
    minimum samples the ratio applied to the model's window changes once; the same request
    again gives the same sample and changes nothing."""
    url = start_proxy()
    body = {"model": MODEL, "messages": convo(3), "stream": stream}
    for _ in range(5):
        assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 200
    wait_for_requests(url, 5)
    text = httpx.get(f"{url}/metrics").text
    assert metric(text, "shrink_calibration_changes_total", model=MODEL) == 1
    assert httpx.get(f"{url}/stats").json()["totals"]["calibration_changes"] == 1
