"""Compaction by summary over real HTTP: proxy, fake upstream, summaries from a fake summarizer."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer
from tests.test_shrink_http import conversation

SETTINGS = dict(context_window=8192, tool_max_tokens=256, completion_reserve=512)


@pytest.fixture(scope="module")
def summarizer_server():
    fake = FakeSummarizer()
    with serve(fake.app()) as url:
        fake.url = url
        yield fake


@pytest.fixture
def summarizer(summarizer_server):
    summarizer_server.reset()
    return summarizer_server


def chat(url: str, msgs: list[dict], **headers: str) -> httpx.Response:
    r = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "fake-model", "messages": msgs},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return r


def test_auto_mode_with_a_summarizer_replaces_dropped_history_with_a_summary(
    start_proxy, upstream, summarizer
):
    url = start_proxy(summary_url=summarizer.url + "/v1", **SETTINGS)
    msgs = conversation(40)
    r = chat(url, msgs)
    assert "summary:1" in r.headers["x-shrink-actions"]
    sent = upstream.last.json()["messages"]
    assert sent[0] == msgs[0] and sent[-1] == msgs[-1]
    note = sent[1]
    assert note["role"] == "system"
    assert "summary of" in note["content"]
    # The summarizer saw the dropped span, not the kept tail.
    assert len(summarizer.requests) == 1
    assert "step 0: install things" in summarizer.prompts[0]
    assert msgs[-1]["content"] not in summarizer.prompts[0]
    assert int(r.headers["x-shrink-tokens-after"]) <= int(r.headers["x-shrink-budget"])


def test_next_turn_reuses_the_summary_and_keeps_the_prefix(start_proxy, upstream, summarizer):
    url = start_proxy(summary_url=summarizer.url + "/v1", **SETTINGS)
    msgs = conversation(40)
    chat(url, msgs)
    first = upstream.last.json()["messages"]
    nxt = msgs + [
        {"role": "assistant", "content": "It failed."},
        {"role": "user", "content": "why?"},
    ]
    r = chat(url, nxt)
    assert "summary:1" in r.headers["x-shrink-actions"]
    assert len(summarizer.requests) == 1  # served from the cache
    assert upstream.last.json()["messages"][: len(first)] == first


def test_slow_summarizer_falls_back_to_trim_then_serves_later_turns(
    start_proxy, upstream, summarizer
):
    summarizer.delay = 1.5
    url = start_proxy(summary_url=summarizer.url + "/v1", summary_timeout=0.3, **SETTINGS)
    msgs = conversation(40)
    t0 = time.monotonic()
    r = chat(url, msgs)
    assert time.monotonic() - t0 < 1.4
    actions = r.headers["x-shrink-actions"]
    assert "trim:" in actions and "summary_fallback:1" in actions
    assert "omitted" in upstream.last.json()["messages"][1]["content"]
    # The summary finished in the background; the same turn again now gets it at once.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        r = chat(url, msgs)
        if "summary:1" in r.headers["x-shrink-actions"]:
            break
    assert "summary:1" in r.headers["x-shrink-actions"]
    assert len(summarizer.requests) == 1


def test_broken_summarizer_never_fails_the_request(start_proxy, upstream, summarizer):
    summarizer.status = 500
    url = start_proxy(summary_url=summarizer.url + "/v1", **SETTINGS)
    r = chat(url, conversation(40))
    assert "summary_fallback:1" in r.headers["x-shrink-actions"]
    summarizer.status, summarizer.garbage = 200, b'{"choices": "nope"}'
    r = chat(url, conversation(41))
    assert "summary_fallback:1" in r.headers["x-shrink-actions"]


def test_compact_header_uses_the_upstream_as_summarizer(start_proxy, upstream):
    """Without SHRINK_SUMMARY_URL, x-shrink-mode: compact asks the upstream itself."""
    url = start_proxy(**SETTINGS)
    r = chat(url, conversation(40), **{"x-shrink-mode": "compact"})
    assert "summary:1" in r.headers["x-shrink-actions"]
    bodies = [rec.json() for rec in upstream.requests]
    assert len(bodies) == 2  # the summary request, then the chat request
    assert "step 0: install things" in bodies[0]["messages"][-1]["content"]
    # Without a summarizer of its own, auto mode only trims.
    r = chat(url, conversation(40))
    assert "summary" not in r.headers["x-shrink-actions"]


def actions_of(r: httpx.Response) -> dict[str, int]:
    pairs = (a.split(":") for a in r.headers["x-shrink-actions"].split(",") if a)
    return {k: int(v) for k, v in pairs}


def metric(url: str, line: str) -> float:
    """The value of one exact `name{labels}` series on /metrics (0 when absent)."""
    for row in httpx.get(url + "/metrics").text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def test_identical_concurrent_then_sequential_requests_make_one_summary(
    start_proxy, upstream, summarizer
):
    """Three identical compact requests at once share one summarizer call; the next one, sent
    while that call still runs, waits on it too; later ones reuse the cached text."""
    summarizer.delay = 1.6
    url = start_proxy(summary_url=summarizer.url + "/v1", summary_timeout=1.0, **SETTINGS)
    msgs = conversation(40)
    with ThreadPoolExecutor(3) as pool:
        first = list(pool.map(lambda _: chat(url, msgs), range(3)))
    assert all(actions_of(r).get("summary_fallback") == 1 for r in first)
    assert len(summarizer.requests) == 1
    # The call goes on (1.6 s): the next request joins it and gets the summary in its 1 s.
    r = chat(url, msgs)
    assert actions_of(r).get("summary") == 1, r.headers["x-shrink-actions"]
    assert "summary of" in upstream.last.json()["messages"][1]["content"]
    again = chat(url, msgs)
    assert actions_of(again).get("summary") == 1
    assert upstream.last.json()["messages"][1] == upstream.requests[-2].json()["messages"][1]
    assert len(summarizer.requests) == 1
    assert metric(url, 'shrink_summaries_made_total{result="ok"}') == 1
    assert metric(url, 'shrink_summarizer_calls_total{outcome="timeout"}') == 3
    joined = metric(url, 'shrink_summarizer_calls_total{outcome="joined"}')
    assert joined + metric(url, 'shrink_summarizer_calls_total{outcome="cache"}') == 2


def test_a_known_slow_summarizer_is_not_waited_for(start_proxy, upstream, summarizer):
    """Once summaries are known to take longer than the timeout, the first turn of another
    conversation is trimmed at once (`summary_deferred`); its summary, made in the background,
    serves the next turn."""
    summarizer.delay = 2.0
    url = start_proxy(summary_url=summarizer.url + "/v1", summary_timeout=1.0, **SETTINGS)
    one = conversation(40)
    t0 = time.monotonic()
    r = chat(url, one)
    assert actions_of(r).get("summary_fallback") == 1  # not known yet: waited the 1 s
    assert time.monotonic() - t0 >= 1.0
    deadline = time.monotonic() + 10
    while metric(url, 'shrink_summaries_made_total{result="ok"}') < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Another conversation: its first turn does not wait the 1 s for a 2 s summary.
    two = [{**m, "content": m["content"] + " (two)"} if m.get("content") else m for m in one]
    t0 = time.monotonic()
    r = chat(url, two)
    took = time.monotonic() - t0
    assert actions_of(r).get("summary_deferred") == 1, r.headers["x-shrink-actions"]
    assert "summary_fallback" not in actions_of(r)
    assert took < 1.0, took
    assert metric(url, 'shrink_summarizer_duration_seconds_sum{outcome="deferred"}') < 0.1
    assert "omitted" in upstream.last.json()["messages"][1]["content"]
    assert len(summarizer.requests) == 2  # its summary is being made
    deadline = time.monotonic() + 10
    while True:
        r = chat(url, two)
        if actions_of(r).get("summary") == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert actions_of(r).get("summary") == 1
    assert len(summarizer.requests) == 2
    assert metric(url, 'shrink_summarizer_calls_total{outcome="deferred"}') >= 1


def test_a_summary_in_flight_too_long_is_not_waited_for_by_other_spans(
    start_proxy, upstream, summarizer
):
    """Before any summary has finished: a call already running past the timeout says the
    summarizer is slow, so a request for another span does not wait either."""
    summarizer.delay = 3.0
    url = start_proxy(summary_url=summarizer.url + "/v1", summary_timeout=1.0, **SETTINGS)
    r = chat(url, conversation(40))
    assert actions_of(r).get("summary_fallback") == 1
    t0 = time.monotonic()
    r = chat(url, conversation(44))
    assert actions_of(r).get("summary_deferred") == 1, r.headers["x-shrink-actions"]
    assert time.monotonic() - t0 < 1.0
    assert metric(url, 'shrink_summarizer_duration_seconds_sum{outcome="deferred"}') < 0.1


def test_a_deferred_summary_by_the_upstream_starts_after_the_request(start_proxy, upstream):
    """The upstream writing its own summaries (a one-slot local server, say): a summary the
    request does not wait for is asked for only once the request's own call is over, so the
    server does not make the client's turn queue behind it."""
    # Any loopback summary takes longer than 0.5 ms: after one, the summarizer is "slow".
    url = start_proxy(summary_timeout=0.0005, **SETTINGS)
    compact = {"x-shrink-mode": "compact"}
    chat(url, conversation(40), **compact)
    deadline = time.monotonic() + 10
    while metric(url, 'shrink_summaries_made_total{result="ok"}') < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    upstream.reset()
    r = chat(url, conversation(44), **compact, **{"x-fake-delay": "0.5"})
    assert actions_of(r).get("summary_deferred") == 1, r.headers["x-shrink-actions"]
    while len(upstream.requests) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    chat_request, summary_request = upstream.requests[:2]
    assert chat_request.json()["messages"][-1] == conversation(44)[-1]
    assert "handoff note" in summary_request.json()["messages"][0]["content"]
