"""The fake Anthropic upstream is faithful enough to test against: the real `anthropic` SDK
(messages.create, messages.stream, count_tokens, its error classes) works against it directly."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import orjson
import pytest

from proxy.overflow import Overflow, parse_overflow
from proxy.sse import AnthropicUsageTap, cache_fields, prompt_tokens
from tests.fakes.anthropic import SIGNATURE, THINKING, FakeAnthropic, count_tokens

MODEL = "claude-fake-1"
HELLO = [{"role": "user", "content": "Hello there"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture
def fake(anthropic_upstream: FakeAnthropic) -> FakeAnthropic:
    return anthropic_upstream


@pytest.fixture
def sdk(fake: FakeAnthropic) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.url, api_key="sk-fake", max_retries=0, timeout=30) as c:
        yield c


def test_create_answers_text_and_counts_with_the_stated_rule(fake, sdk):
    msg = sdk.messages.create(model=MODEL, max_tokens=32, system="Be brief.", messages=HELLO)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "tok0 tok1 tok2 "
    assert msg.stop_reason == "end_turn" and msg.usage.output_tokens == 3
    sent = fake.last
    assert sent.path == "/v1/messages" and sent.method == "POST"
    # anthropic 2.x sends its api_key as a Bearer token (1.x and before: as x-api-key).
    key = sent.header("x-api-key") or (sent.header("authorization") or "").removeprefix("Bearer ")
    assert key == "sk-fake" and sent.header("anthropic-version")
    prompt = count_tokens(sent.json())
    assert prompt == -(-len(b'{"system":"Be brief.","messages":' + orjson.dumps(HELLO) + b"}") // 4)
    assert msg.usage.input_tokens == prompt and msg.usage.cache_read_input_tokens == 0


def test_stream_is_anthropic_s_event_sequence_and_the_sdk_accumulates_it(fake, sdk):
    with sdk.messages.stream(model=MODEL, max_tokens=32, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "tok0 tok1 tok2 " == final.content[0].text
    assert final.usage.output_tokens == 3 and final.usage.input_tokens == count_tokens(
        fake.last.json()
    )
    raw = httpx.post(
        fake.url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": HELLO, "stream": True},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    names = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    # The proxy's tap reads the same prompt size from these bytes as the fake counted.
    tap = AnthropicUsageTap()
    assert tap.feed(raw.content) + tap.close() == raw.content
    assert prompt_tokens(tap.usage) == count_tokens(fake.last.json())
    assert tap.usage is not None and tap.usage["output_tokens"] == 3


def test_tool_use_answer_streams_input_json_deltas(fake, sdk):
    headers = {"x-fake-answer": "tool_use"}
    with sdk.messages.stream(
        model=MODEL, max_tokens=32, messages=HELLO, tools=TOOLS, extra_headers=headers
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    text, call = final.content
    assert text.type == "text" and call.type == "tool_use"
    assert call.name == "get_weather" and call.input == {"query": "fake", "n": 1}
    assert call.id == "toolu_fake01"
    # The loop goes on: the result in a user turn is accepted and answered.
    msg = sdk.messages.create(
        model=MODEL,
        max_tokens=32,
        tools=TOOLS,
        messages=[
            *HELLO,
            {"role": "assistant", "content": [b.model_dump() for b in final.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
            },
        ],
    )
    assert msg.content[0].text


def test_thinking_answer_has_its_signature(fake, sdk):
    for stream in (False, True):
        headers = {"x-fake-answer": "thinking"}
        if stream:
            with sdk.messages.stream(
                model=MODEL, max_tokens=32, messages=HELLO, extra_headers=headers
            ) as s:
                msg = s.get_final_message()
        else:
            msg = sdk.messages.create(
                model=MODEL, max_tokens=32, messages=HELLO, extra_headers=headers
            )
        thinking, text = msg.content
        assert thinking.type == "thinking" and thinking.thinking == THINKING
        assert thinking.signature == SIGNATURE and text.type == "text"


def test_count_tokens(fake, sdk):
    n = sdk.messages.count_tokens(model=MODEL, messages=HELLO, system="Be brief.", tools=TOOLS)
    assert n.input_tokens == count_tokens(fake.last.json())
    assert fake.last.path == "/v1/messages/count_tokens"


def test_over_the_limit_is_anthropic_s_real_400_and_parse_overflow_reads_it(fake, sdk):
    fake.context_limit = 20
    long = [{"role": "user", "content": "word " * 40}]
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model=MODEL, max_tokens=8, messages=long)
    prompt = count_tokens(fake.last.json())
    assert info.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {prompt} tokens > 20 maximum",
        },
    }
    raw = httpx.post(
        fake.url + "/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": long}
    )
    assert parse_overflow(raw.status_code, raw.content) == Overflow(limit=20, prompt_tokens=prompt)
    # Fits, but not with its max_tokens: Anthropic's other wording, read too.
    fake.context_limit = count_tokens({"messages": HELLO}) + 4
    raw = httpx.post(
        fake.url + "/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": HELLO}
    )
    assert raw.status_code == 400 and "exceed context limit" in raw.json()["error"]["message"]
    assert parse_overflow(raw.status_code, raw.content) == Overflow(
        limit=fake.context_limit, prompt_tokens=fake.context_limit - 4
    )


def test_prefix_cache_reports_the_shared_prefix_as_cache_reads(fake, sdk):
    fake.prefix_cache = True
    history = [{"role": "user", "content": "a long shared question " * 20}]
    first = sdk.messages.create(model=MODEL, max_tokens=8, messages=history)
    assert first.usage.cache_read_input_tokens == 0
    more = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]
    second = sdk.messages.create(model=MODEL, max_tokens=8, messages=more)
    usage = second.usage.model_dump()
    cached = usage["cache_read_input_tokens"]
    assert cached > 0.8 * first.usage.input_tokens
    assert prompt_tokens(usage) == count_tokens(fake.last.json())
    assert cache_fields(usage, None) == {"cached_tokens": cached}


def test_status_errors_are_anthropic_shaped(fake, sdk):
    with pytest.raises(anthropic.OverloadedError) as info:
        sdk.messages.create(
            model=MODEL, max_tokens=8, messages=HELLO, extra_headers={"x-fake-status": "529"}
        )
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    fake.api_key = "right"
    with pytest.raises(anthropic.AuthenticationError):
        sdk.messages.create(model=MODEL, max_tokens=8, messages=HELLO)
    ok = {"x-api-key": "right", "authorization": ""}
    assert sdk.messages.create(model=MODEL, max_tokens=8, messages=HELLO, extra_headers=ok)
    with pytest.raises(anthropic.NotFoundError):
        sdk.models.list()


def test_in_band_error_event_mid_stream(fake, sdk):
    with pytest.raises(anthropic.APIStatusError) as info:
        with sdk.messages.stream(
            model=MODEL,
            max_tokens=8,
            messages=HELLO,
            extra_headers={"x-fake-error-event": "overloaded_error"},
        ) as stream:
            for _ in stream:
                pass
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_dropped_stream_ends_without_message_stop(fake):
    body = {"model": MODEL, "max_tokens": 8, "messages": HELLO, "stream": True}
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream(
            "POST", fake.url + "/v1/messages", json=body, headers={"x-fake-drop-after": "3"}
        ) as r:
            for chunk in r.iter_raw():
                got += chunk
    assert got.count(b"event: ") == 3 and b"message_stop" not in got
    assert fake.streams_dropped == 1
