"""The proxy against a real llama.cpp server running a real model (SmolLM2-135M, 2048 tokens).

What the fakes cannot show: the real server's `/props`, its real overflow error, its own
tokenizer counting differently from ours, its SSE stream with the usage chunk, and summaries
written by a real (if tiny) model. Generations are kept to a few tokens; a long prompt costs
about 5 ms per token on one CPU thread, so the whole file takes well under a minute.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from proxy.overflow import Overflow, parse_overflow
from proxy.pipeline.refs import text_ref
from tests.conftest import CORPUS
from tests.e2e.conftest import CONFIGURED_WINDOW, MODEL, N_CTX, Llama, ProxyFactory
from tests.e2e.tap import Tap

pytestmark = pytest.mark.e2e

TIMEOUT = 300.0  # one CPU thread on a shared machine: prompts of ~1.5k tokens take seconds
SUMMARY_SETTINGS: dict[str, Any] = dict(summary_max_tokens=64, summary_timeout=150.0)
SUMMARY_HEADER = "[shrink-proxy: summary of"
# Tool outputs of a real agent session: 30 messages, 13k llama.cpp tokens.
LONG = "dev-10-requests-invalidschema-traceback"
# 36 messages of short compiler outputs, 4.9k tokens: the dropped span alone exceeds 2048.
MANY_SMALL = "dev-07-gcc-ringbuf-errors"


def corpus(name: str) -> list[dict[str, Any]]:
    path = CORPUS / f"{name}.json"
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"corpus file missing: {path}", pytrace=False)
        pytest.skip(f"corpus not found at {CORPUS}")
    return orjson.loads(path.read_bytes())["messages"]  # type: ignore[no-any-return]


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def chat(url: str, messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 16, "temperature": 0}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=TIMEOUT)


def actions(r: httpx.Response) -> dict[str, int]:
    """`x-shrink-actions` (`tools:6,trim:16`) as a dict."""
    pairs = (a.split(":") for a in r.headers["x-shrink-actions"].split(",") if a)
    return {k: int(v) for k, v in pairs}


def answer_text(r: httpx.Response) -> str:
    return r.json()["choices"][0]["message"]["content"]  # type: ignore[no-any-return]


HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]


def test_chat_completion_through_the_proxy(llama_proxy: ProxyFactory, tap: Tap) -> None:
    reply = client(llama_proxy()).chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=16, temperature=0
    )
    assert reply.choices[0].message.content and reply.choices[0].message.content.strip()
    assert reply.usage is not None
    assert 0 < reply.usage.completion_tokens <= 16
    # Nothing needed shrinking: the request reached llama.cpp byte for byte.
    (sent,) = tap.chats()
    assert sent.json()["messages"] == HELLO


def test_stream_hides_the_usage_chunk_the_proxy_asked_for(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    stream = client(llama_proxy()).chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=16, temperature=0, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) >= 3
    assert text.strip()
    assert all(c.usage is None and c.choices for c in chunks)
    # The proxy asked llama.cpp for the usage chunk, and llama.cpp sent it.
    (sent,) = tap.chats()
    assert sent.json()["stream_options"] == {"include_usage": True}
    assert b'"usage"' in sent.response and b'"prompt_tokens"' in sent.response


def logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records if r.name == "proxy.request"]  # type: ignore[attr-defined]


def test_prefix_cache_figures_reach_the_log_line_and_metrics(
    llama_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp reports its prefix cache as `timings.cache_n`/`prompt_n` (and, in newer
    builds, `usage.prompt_tokens_details.cached_tokens`); the same prompt twice is served from
    its cache the second time, in a JSON answer and in a stream's usage chunk alike."""
    caplog.set_level(logging.INFO, logger="proxy.request")
    url = llama_proxy()
    system = {"role": "system", "content": "You are a terse assistant. " * 12}
    messages = [system, *HELLO]
    for _ in range(2):
        assert chat(url, messages).status_code == 200
    stream = client(url).chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=4,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    assert all(c.usage is None for c in stream)
    # The stream's line is written once the proxy's relay has ended, which may be a moment
    # after the client read the last event.
    deadline = time.monotonic() + 10
    while len(logged(caplog)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = logged(caplog)
    assert len(lines) == 3
    for line in lines:
        assert line["cache_n"] + line["prompt_n"] == line["upstream_prompt_tokens"], line
    assert lines[1]["cache_n"] > 0.9 * lines[1]["upstream_prompt_tokens"]  # the prefix reused
    assert lines[2]["cache_n"] > 0  # read from the usage chunk the client never saw
    text = httpx.get(url + "/metrics").text
    values = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("model") == MODEL
    }
    cached = sum(line["cache_n"] for line in lines)
    assert values["shrink_upstream_cached_tokens_total"] == cached
    assert values["shrink_upstream_cache_prompt_tokens_total"] == sum(
        line["upstream_prompt_tokens"] for line in lines
    )
    assert values["shrink_upstream_cache_reports_total"] == 3
    (row,) = httpx.get(url + "/stats").json()["prefix_cache"]["by_model"]
    assert row["model"] == MODEL and row["cached_tokens"] == cached and row["reuse_pct"] > 50


def test_window_is_discovered_from_props(llama_proxy: ProxyFactory, tap: Tap) -> None:
    r = chat(llama_proxy(), HELLO)
    assert r.status_code == 200, r.text
    assert "GET /props" in tap.paths()
    budget = int(r.headers["x-shrink-budget"])
    assert budget < N_CTX < CONFIGURED_WINDOW
    assert budget > N_CTX // 2  # the served window minus a 16-token answer and a small margin


def test_long_session_fits_only_because_the_proxy_shrank_it(
    llama_server: Llama, llama_proxy: ProxyFactory, tap: Tap
) -> None:
    messages = corpus(LONG)
    direct = chat(llama_server.url, messages)
    assert direct.status_code == 400
    error = direct.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == N_CTX and error["n_prompt_tokens"] > 3 * N_CTX
    # The parser reads the true limit, and llama.cpp's own count, from the real body.
    assert parse_overflow(direct.status_code, direct.content) == Overflow(
        limit=N_CTX, prompt_tokens=error["n_prompt_tokens"]
    )

    r = chat(llama_proxy(), messages, **{"x-shrink-mode": "trim"})
    assert r.status_code == 200, r.text
    assert actions(r).get("trim", 0) > 0
    assert "x-shrink-retried" not in r.headers  # discovery made the first attempt fit
    assert answer_text(r).strip()
    (sent,) = tap.chats()
    kept = sent.json()["messages"]
    assert len(kept) < len(messages)
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    assert r.json()["usage"]["prompt_tokens"] <= N_CTX - 16


def test_overflow_is_parsed_and_retried_without_discovery(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    url = llama_proxy(discover_window=False)
    messages = corpus(LONG)
    r = chat(url, messages, **{"x-shrink-mode": "trim"})
    assert r.status_code == 200, r.text
    assert r.headers["x-shrink-retried"] == "overflow"
    assert actions(r).get("trim", 0) > 0
    assert int(r.headers["x-shrink-budget"]) < N_CTX
    assert answer_text(r).strip()
    first, retry = tap.chats()
    assert first.status == 400 and b"exceed_context_size_error" in first.response
    assert len(first.json()["messages"]) == len(messages)  # 32768 assumed: nothing dropped
    assert retry.status == 200
    assert not any(p.startswith("GET /props") for p in tap.paths())

    # The same conversation streamed: the overflow is answered before the first byte.
    body = {"model": MODEL, "messages": messages, "max_tokens": 8, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as stream:
        assert stream.status_code == 200
        assert stream.headers["x-shrink-retried"] == "overflow"
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert not any('"usage"' in e for e in events)


def test_compact_mode_inserts_a_summary_written_by_the_model(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    messages = corpus(LONG)
    r = chat(llama_proxy(**SUMMARY_SETTINGS), messages, **{"x-shrink-mode": "compact"})
    assert r.status_code == 200, r.text
    done = actions(r)
    assert done.get("summary") == 1 and "summary_fallback" not in done, done
    summary_call, sent = tap.chats()
    assert summary_call.status == 200
    assert summary_call.json()["max_tokens"] == SUMMARY_SETTINGS["summary_max_tokens"]
    written = summary_call.answer()["choices"][0]["message"]["content"].strip()
    assert written
    kept = sent.json()["messages"]
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    note = kept[1]
    assert note["role"] == "system"
    assert note["content"].startswith(SUMMARY_HEADER)
    assert written in note["content"]  # the model's own words reached the upstream
    assert sum(SUMMARY_HEADER in str(m.get("content")) for m in kept) == 1
    assert answer_text(r).strip()


def test_summary_request_fits_the_summarizers_window(llama_proxy: ProxyFactory, tap: Tap) -> None:
    r = chat(llama_proxy(**SUMMARY_SETTINGS), corpus(MANY_SMALL), **{"x-shrink-mode": "compact"})
    assert r.status_code == 200, r.text
    summary_call = tap.chats()[0]
    assert summary_call.status == 200, summary_call.response[:300]
    assert actions(r).get("summary") == 1


def test_compact_mode_summarizes_after_an_overflow_retry(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    url = llama_proxy(discover_window=False, **SUMMARY_SETTINGS)
    r = chat(url, corpus(LONG), **{"x-shrink-mode": "compact"})
    assert r.status_code == 200, r.text
    assert r.headers["x-shrink-retried"] == "overflow"
    done = actions(r)
    assert done.get("trim", 0) > 0
    assert "summary" in done or "summary_fallback" in done, done


def summaries_made(url: str) -> float:
    for row in httpx.get(url + "/metrics", timeout=TIMEOUT).text.splitlines():
        if row.startswith('shrink_summaries_made_total{result="ok"} '):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def wait_for_summaries(url: str, n: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while summaries_made(url) < n:
        assert time.monotonic() < deadline, f"fewer than {n} summaries made in {TIMEOUT:g}s"
        time.sleep(0.5)


def test_a_slow_local_summary_is_made_once_and_serves_the_next_turns(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    """The real server writes its own summaries more slowly than the proxy waits: the first turn
    is trimmed, the summary is made once in the background and the next turn inserts it; once
    the summarizer is known to be slow, another session's first turn does not wait at all, and
    its summary is asked for only after its own chat call (llama.cpp has one slot)."""
    url = llama_proxy(**{**SUMMARY_SETTINGS, "summary_timeout": 0.5})
    compact = {"x-shrink-mode": "compact"}
    messages = corpus(LONG)
    first = chat(url, messages, **compact)
    assert first.status_code == 200, first.text
    assert actions(first).get("summary_fallback") == 1, actions(first)
    wait_for_summaries(url, 1)
    second = chat(url, messages, **compact)
    assert second.status_code == 200, second.text
    assert actions(second).get("summary") == 1, actions(second)
    summary_calls = [e for e in tap.chats() if "handoff note" in str(e.json()["messages"])]
    assert len(summary_calls) == 1  # made once, for both turns
    written = summary_calls[0].answer()["choices"][0]["message"]["content"].strip()
    assert written in tap.chats()[-1].json()["messages"][1]["content"]

    # Another session: its first user message (in the dropped span) differs.
    other = [messages[0], {**messages[1], "content": f"{messages[1]['content']} (again)"}]
    other += messages[2:]
    began = time.monotonic()
    third = chat(url, other, **compact)
    assert third.status_code == 200, third.text
    assert actions(third).get("summary_deferred") == 1, actions(third)
    wait_for_summaries(url, 2)
    assert time.monotonic() - began < TIMEOUT
    done = tap.chats()  # in the order llama.cpp finished them
    assert "handoff note" in str(done[-1].json()["messages"])  # after the turn's own call
    assert other[-1] in done[-2].json()["messages"]


def test_one_huge_prompt_is_cut_in_its_middle_and_answered(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    """`cat big.log | llm "summarise"`: one user message three times the real window. The
    proxy cuts its middle (marked) so that llama.cpp, counting with its own tokenizer, takes it,
    tells the client in `x-shrink-warning`, and the model answers."""
    log = "".join(
        f"2026-12-01 10:{i // 60 % 60:02d}:{i % 60:02d} INFO worker-{i % 5} job {i} done in "
        f"{i * 37 % 900} ms\n"
        for i in range(600)
    )
    prompt = log + "Summarise this log in one sentence."
    with client(llama_proxy()) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=16,
            temperature=0,
        )
        reply = raw.parse()
    assert raw.headers["x-shrink-warning"] == "latest-user-cut"
    assert reply.choices[0].message.content and reply.choices[0].message.content.strip()
    assert reply.usage is not None and reply.usage.prompt_tokens <= N_CTX - 16
    sent = tap.chats()[-1].json()["messages"][-1]["content"]
    assert sent.startswith(log[:100]) and sent.endswith("Summarise this log in one sentence.")
    # The marker names the whole message, kept for retrieval (GET /v1/retrieve or the tool).
    assert f"omitted by shrink-proxy. Retrieve more: hash={text_ref(prompt)} ...]" in sent
