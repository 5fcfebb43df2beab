"""Compaction by summary over real HTTP: proxy, fake upstream, summaries from a fake summarizer."""

from __future__ import annotations

import time

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
