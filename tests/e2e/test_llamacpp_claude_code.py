"""Claude Code's requests through the proxy to llama.cpp's real `/v1/messages`.

The dev corpus's long session in Claude Code's shape (bench.anthropic_form.claude_code) is ~5x
the server's 2048-token window in its own tokenizer: it is answered only because the proxy shrank
it, streamed, with the signed thinking blocks it kept unchanged and `count_tokens` telling what
the model really reads. Then a session replayed turn by turn (bench.billing_reuse) shows what
removing the billing line's per-request value buys on the server's prefix cache.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import orjson
import pytest

from bench import corpus as dev
from bench.anthropic_form import breakpoints, claude_code, pairing_ok, to_anthropic
from bench.billing_reuse import replay, requests
from proxy.sse import AnthropicUsageTap, prompt_tokens
from tests.e2e.conftest import MODEL, N_CTX, ProxyFactory
from tests.e2e.tap import Exchange, Tap
from tests.e2e.test_llamacpp import LONG, TIMEOUT, actions, corpus

pytestmark = pytest.mark.e2e

REUSE_SESSION = "dev-04-attrs-maxlen-regression-long"
REUSE_TURNS = 5


def messages_sent(tap: Tap, path: str = "/v1/messages") -> list[Exchange]:
    with tap.lock:
        return [e for e in tap.exchanges if e.path == path]


def claude_code_body() -> tuple[dict[str, str], dict[str, Any]]:
    chat = {"model": MODEL, "messages": corpus(LONG)}
    headers, body = claude_code(to_anthropic(chat), turn=7)
    del body["thinking"]  # SmolLM2 has no thinking mode to switch on; the signed blocks stay
    body.update(max_tokens=16, temperature=0)
    return headers, body


def test_a_claude_code_session_fits_only_shrunk_and_streams(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    url = llama_proxy()
    headers, body = claude_code_body()
    with httpx.Client(timeout=TIMEOUT) as client:
        whole = client.post(
            tap.url + "/v1/messages/count_tokens",  # type: ignore[attr-defined]
            json={k: body[k] for k in ("model", "system", "messages", "tools") if k in body},
            headers=headers,
        )
        assert whole.json()["input_tokens"] > 4 * N_CTX  # unshrunk it could never fit
        r = client.post(url + "/v1/messages", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    tap_usage = AnthropicUsageTap()
    tap_usage.feed(r.content)
    tap_usage.close()
    prompt = prompt_tokens(tap_usage.usage)
    assert prompt is not None and prompt < N_CTX
    assert actions(r).get("trim", 0) > 0

    sent = orjson.loads(messages_sent(tap)[-1].body)
    assert "cch=" not in sent["system"][0]["text"]
    assert sent["system"][1:] == body["system"][1:]
    assert breakpoints(sent) <= 4 and pairing_ok(sent)
    assert sent["messages"][-1] == body["messages"][-1]  # the latest turn whole
    signed = {orjson.dumps(b) for m in body["messages"] for b in m["content"]}
    kept = [
        b
        for m in sent["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    ]
    assert kept and all(orjson.dumps(b) in signed for b in kept)

    # count_tokens through the proxy: llama.cpp's own count of the request as forwarded.
    count = {k: body[k] for k in ("model", "system", "messages", "tools") if k in body}
    with httpx.Client(timeout=TIMEOUT) as client:
        c = client.post(url + "/v1/messages/count_tokens", json=count, headers=headers)
    assert c.status_code == 200, c.text
    assert messages_sent(tap, "/v1/messages/count_tokens")[-1].status == 200
    counted = c.json()["input_tokens"]
    assert counted < N_CTX and abs(counted - prompt) <= 0.1 * prompt


def test_stripping_the_billing_value_lets_the_server_reuse_the_prefix(
    llama_proxy: ProxyFactory,
) -> None:
    """The same turns with the billing line's value kept and stripped (the default for a
    non-Anthropic upstream): kept, each turn's prompt diverges from the last after a few dozen
    tokens; stripped, the server reads most of every turn from its cache. bench.billing_reuse
    measured the session's last 8 turns at a 4096 window: 87.4% reused vs 1.1%, 2.5 s a turn vs
    15.2 s."""
    conv = next(c for c in dev.load() if c.id == REUSE_SESSION)
    sent = requests(conv, REUSE_TURNS)
    keep = replay(llama_proxy(billing_header="keep"), "keep", sent)
    strip = replay(llama_proxy(), "strip", sent)  # billing_header=auto: a local upstream
    for tally in (keep, strip):
        assert not tally.failures, tally
    assert keep.reuse < 0.1, keep
    assert strip.reuse > 0.6, strip


def test_the_anthropic_sdk_through_the_proxy(llama_proxy: ProxyFactory, tap: Tap) -> None:
    """messages.create, messages.stream, a tool-use loop and count_tokens, from the official SDK
    through the proxy to llama.cpp: the long conversation is answered only shrunk."""
    url = llama_proxy()
    body = to_anthropic({"model": MODEL, "messages": corpus(LONG)})
    body.update(max_tokens=8)
    with anthropic.Anthropic(
        base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        raw = client.messages.with_raw_response.create(**body, extra_body={"temperature": 0})
        assert actions(raw.http_response).get("trim", 0) > 0
        message = raw.parse()
        assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) < N_CTX

        with client.messages.stream(
            model=MODEL, max_tokens=8, messages=body["messages"], system=body["system"]
        ) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
        assert streamed == "".join(b.text for b in final.content if b.type == "text")

        # A tool-use loop: the model's turn, then our tool's result, then its next turn.
        tools = [
            {
                "name": "run",
                "description": "Run a shell command and return its output.",
                "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ]
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "Run the tests with the run tool."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"cmd": "pytest"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "collected 3 items\n\ntests/test_a.py ... [100%]\n3 passed",
                    }
                ],
            },
        ]
        first = client.messages.create(model=MODEL, max_tokens=8, tools=tools, messages=history)
        history += [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "Thanks. Did they pass?"},
        ]
        if any(b.type == "tool_use" for b in first.content):  # answer every call it made
            calls = [b for b in first.content if b.type == "tool_use"]
            history[-1] = {
                "role": "user",
                "content": [
                    *[{"type": "tool_result", "tool_use_id": c.id, "content": "ok"} for c in calls],
                    {"type": "text", "text": "Thanks. Did they pass?"},
                ],
            }
        second = client.messages.create(model=MODEL, max_tokens=8, tools=tools, messages=history)
        assert second.content and second.usage.input_tokens > 0

        counted = client.messages.count_tokens(
            model=MODEL, system=body["system"], messages=body["messages"]
        ).input_tokens
    assert messages_sent(tap, "/v1/messages/count_tokens")[-1].status == 200
    assert counted < N_CTX  # llama.cpp's count of the request as the proxy forwards it
