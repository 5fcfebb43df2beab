"""/v1/messages shrunk in flight: the real anthropic SDK through the proxy to the fake Anthropic
upstream (tests/fakes/anthropic.py), including a long agent conversation that fits only because
the proxy shrank it, Claude Code's request shape, count_tokens and the overflow retry."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from bench import corpus
from bench.anthropic_form import breakpoints, claude_code, pairing_ok, to_anthropic
from proxy.app import create_app
from proxy.retrieval.tool import MESSAGES_TOOL
from proxy.settings import Settings
from tests.fakes.anthropic import FakeAnthropic, count_tokens
from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer

MODEL = "claude-fake-1"
HELLO = [{"role": "user", "content": "Hello there"}]
LONG = "dev-04-attrs-maxlen-regression-long"


@pytest.fixture
def fake(anthropic_upstream: FakeAnthropic) -> FakeAnthropic:
    return anthropic_upstream


@pytest.fixture
def start(fake: FakeAnthropic) -> Iterator[Any]:
    with ExitStack() as stack:

        def run(**overrides: Any) -> str:
            overrides.setdefault("upstream_url", fake.url + "/v1")
            overrides.setdefault("discover_window", False)
            return stack.enter_context(serve(create_app(Settings(**overrides))))

        yield run


def sdk(url: str, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-client", max_retries=0, timeout=60, **kw)


def long_body(**extra: Any) -> dict[str, Any]:
    conv = next(c for c in corpus.load() if c.id == LONG)
    return {**to_anthropic({**conv.request(), "model": MODEL}, default_max_tokens=1024), **extra}


def test_a_short_request_goes_upstream_byte_for_byte(start: Any, fake: FakeAnthropic) -> None:
    url = start()
    raw = orjson.dumps({"model": MODEL, "max_tokens": 16, "messages": HELLO, "metadata": {}})
    r = httpx.post(url + "/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert fake.last.body == raw
    assert r.headers["x-shrink-actions"] == "none"
    assert int(r.headers["x-shrink-tokens-before"]) == int(r.headers["x-shrink-tokens-after"])


def test_a_long_agent_conversation_fits_because_it_was_shrunk(
    start: Any, fake: FakeAnthropic
) -> None:
    body = long_body()
    fake.context_limit = 12_000  # the fake's count: bytes / 4
    assert count_tokens(body) > 4 * fake.context_limit
    url = start(context_window=8192)
    with sdk(url) as client:
        raw = client.messages.with_raw_response.create(**body)
    assert raw.http_response.status_code == 200
    actions = raw.http_response.headers["x-shrink-actions"]
    assert "tools" in actions and "trim" in actions
    sent = orjson.loads(fake.last.body)
    assert count_tokens(sent) <= fake.context_limit
    assert pairing_ok(sent)
    assert sent["system"] == body["system"]
    # The client's tools as sent, the in-flight retrieval tool after them (markers name refs).
    assert sent["tools"] == [*body["tools"], MESSAGES_TOOL]
    assert sent["messages"][-1] == body["messages"][-1]  # the latest turn intact
    marker = sent["messages"][0]
    assert marker["role"] == "user" and "omitted" in marker["content"]


def test_a_stream_is_relayed_byte_for_byte_and_its_usage_read(
    start: Any, fake: FakeAnthropic
) -> None:
    url = start(context_window=8192)
    body = {**long_body(), "stream": True}
    r = httpx.post(url + "/v1/messages", json=body, headers={"x-fake-answer": "tool_use"})
    assert r.status_code == 200 and r.content == fake.sent
    assert b"event: message_stop" in r.content and b"input_json_delta" in r.content
    stats = httpx.get(url + "/stats").json()
    assert stats["by_api"][0]["api"] == "anthropic"


def test_a_tool_use_loop_through_the_sdk(start: Any, fake: FakeAnthropic) -> None:
    url = start(context_window=8192)
    tools = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run the tests"}]
    with sdk(url, default_headers={"x-fake-answer": "tool_use"}) as client:
        for round_ in range(3):
            msg = client.messages.create(model=MODEL, max_tokens=64, tools=tools, messages=messages)
            use = next(b for b in msg.content if b.type == "tool_use")
            messages.append({"role": "assistant", "content": [b.model_dump() for b in msg.content]})
            log = "\n".join(f"line {i} of round {round_}" for i in range(3000))
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use.id, "content": log}],
                }
            )
    sent = orjson.loads(fake.last.body)
    assert pairing_ok(sent)
    results = [
        b
        for m in sent["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results and all("omitted by shrink-proxy" in b["content"] for b in results)


def test_claude_codes_request_shape(start: Any, fake: FakeAnthropic) -> None:
    url = start(context_window=16384)
    headers, body = claude_code(long_body(), turn=3)
    r = httpx.post(url + "/v1/messages", json=body, headers=headers)
    assert r.status_code == 200 and b"message_stop" in r.content
    got = fake.last
    assert got.header("anthropic-beta") == headers["anthropic-beta"]
    sent = orjson.loads(got.body)
    assert "cch=" not in sent["system"][0]["text"]  # the per-request value is gone
    assert "x-anthropic-billing-header" in sent["system"][0]["text"]
    assert sent["system"][1:] == body["system"][1:]
    assert breakpoints(sent) <= breakpoints(body) <= 4
    signed = {orjson.dumps(b) for m in body["messages"] for b in m["content"]}
    kept = [
        b
        for m in sent["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    ]
    assert kept and all(orjson.dumps(b) in signed for b in kept)  # byte for byte
    assert pairing_ok(sent)


def test_the_billing_line_is_kept_for_anthropics_own_api(fake: FakeAnthropic) -> None:
    assert Settings(upstream_url="https://api.anthropic.com/v1").strips_billing_header is False
    assert Settings(upstream_url=fake.url + "/v1").strips_billing_header is True
    assert Settings(billing_header="keep").strips_billing_header is False


def test_count_tokens_counts_the_request_as_it_would_be_forwarded(
    start: Any, fake: FakeAnthropic
) -> None:
    url = start(context_window=8192)
    body = long_body()
    body.pop("max_tokens")
    with sdk(url) as client:
        counted = client.messages.count_tokens(**body).input_tokens
    assert fake.last.path == "/v1/messages/count_tokens"
    assert counted == count_tokens(orjson.loads(fake.last.body)) < count_tokens(body) // 4


def test_count_tokens_without_an_upstream_count_is_ours(start: Any, fake: FakeAnthropic) -> None:
    """Ollama has no count endpoint: the proxy answers with its own count of the shrunk request."""
    url = start(context_window=8192)
    body = long_body()
    r = httpx.post(url + "/v1/messages/count_tokens", json=body, headers={"x-fake-status": "404"})
    assert r.status_code == 200
    assert r.json()["input_tokens"] == int(r.headers["x-shrink-tokens-after"])


def test_overflow_is_recovered_at_the_limit_the_upstream_states(
    start: Any, fake: FakeAnthropic
) -> None:
    fake.context_limit = 6000  # the proxy thinks the window is 32k
    url = start()
    with sdk(url) as client:
        raw = client.messages.with_raw_response.create(**long_body())
    assert raw.http_response.headers["x-shrink-retried"] == "overflow"
    assert count_tokens(orjson.loads(fake.last.body)) <= 6000


def test_errors_are_in_anthropics_shape(start: Any, fake: FakeAnthropic) -> None:
    url = start(context_window=4096)
    bad = httpx.post(url + "/v1/messages", json={"model": MODEL, "messages": [{"role": "x"}]})
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    huge = [{"role": "user", "content": "word " * 40_000}]
    r = httpx.post(
        url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": huge},
        headers={"x-shrink-mode": "trim"},
    )
    assert r.status_code in (200, 400)
    if r.status_code == 400:
        assert r.json()["error"]["type"] == "invalid_request_error"
    else:
        assert r.headers["x-shrink-warning"] == "latest-user-cut"


def test_keys_on_this_route(start: Any, fake: FakeAnthropic) -> None:
    url = start(proxy_api_key="inbound", upstream_api_key="sk-upstream")
    ok = httpx.post(
        url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": HELLO},
        headers={"x-api-key": "inbound", "anthropic-version": "2023-06-01"},
    )
    assert ok.status_code == 200
    assert fake.last.header("x-api-key") == "sk-upstream"
    assert fake.last.header("authorization") is None
    denied = httpx.post(
        url + "/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": HELLO}
    )
    assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"


def test_the_preview_and_the_cli_plan_a_messages_body(start: Any) -> None:
    url = start(context_window=8192)
    body = long_body()
    r = httpx.post(url + "/v1/shrink?api=anthropic", json=body)
    assert r.status_code == 200
    assert r.json()["messages"][0]["role"] == "user"
    assert "trim" in r.json()["report"]["actions"]


def test_compact_mode_writes_the_summary_as_a_user_turn(start: Any, fake: FakeAnthropic) -> None:
    """The summarizer (a chat endpoint: SHRINK_SUMMARY_URL) summarizes the dropped span of a
    Messages conversation; the summary takes the trim marker's place, a user turn (the API has
    no system turn), and the tool_use/tool_result pairs after it stay whole."""
    summarizer = FakeSummarizer()
    with serve(summarizer.app()) as summary_url:
        url = start(context_window=8192, summary_url=summary_url + "/v1")
        body = long_body()
        with sdk(url) as client:
            raw = client.messages.with_raw_response.create(
                **body, extra_headers={"x-shrink-mode": "compact"}
            )
    assert raw.http_response.status_code == 200
    assert "summary:1" in raw.http_response.headers["x-shrink-actions"]
    sent = orjson.loads(fake.last.body)
    note = sent["messages"][0]
    assert note["role"] == "user" and "summary of" in note["content"]
    assert pairing_ok(sent) and sent["messages"][-1] == body["messages"][-1]
    assert len(summarizer.requests) == 1
    transcript = summarizer.prompts[0]
    assert "tool_result" not in transcript  # the span is read as text, not as JSON blocks
