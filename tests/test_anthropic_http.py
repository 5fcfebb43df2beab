"""The Anthropic Messages API through the proxy as it stands (the generic /v1 relay) to the fake
Anthropic upstream, driven by the real anthropic SDK: bytes relayed unchanged, and every error the
proxy itself writes on these paths, before or after headers, in Anthropic's shape."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack

import anthropic
import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes import faulty
from tests.fakes.anthropic import FakeAnthropic, count_tokens
from tests.fakes.server import serve

MODEL = "claude-fake-1"
HELLO = [{"role": "user", "content": "Hello there"}]


@pytest.fixture
def fake(anthropic_upstream: FakeAnthropic) -> FakeAnthropic:
    return anthropic_upstream


@pytest.fixture
def proxy(fake: FakeAnthropic) -> Iterator[str]:
    settings = Settings(upstream_url=fake.url + "/v1", discover_window=False)
    with serve(create_app(settings)) as url:
        yield url


def sdk(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-client", max_retries=0, timeout=30)


def test_sdk_through_the_proxy(proxy, fake):
    with sdk(proxy) as client:
        msg = client.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
        with client.messages.stream(
            model=MODEL, max_tokens=16, messages=HELLO, extra_headers={"x-fake-answer": "thinking"}
        ) as stream:
            final = stream.get_final_message()
        n = client.messages.count_tokens(model=MODEL, messages=HELLO)
    assert msg.content[0].text == "tok0 tok1 tok2 "
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert n.input_tokens == count_tokens({"messages": HELLO})
    assert [r.path for r in fake.requests] == [
        "/v1/messages",
        "/v1/messages",
        "/v1/messages/count_tokens",
    ]
    assert fake.requests[0].header("anthropic-version")


def test_stream_bytes_are_relayed_unchanged(proxy, fake):
    body = {"model": MODEL, "max_tokens": 16, "messages": HELLO, "stream": True}
    via = httpx.post(proxy + "/v1/messages", json=body, headers={"x-fake-answer": "tool_use"})
    assert via.status_code == 200 and via.headers["x-accel-buffering"] == "no"
    assert via.content == fake.sent and b"input_json_delta" in via.content


def test_a_client_leaving_right_after_message_stop_had_the_whole_answer(proxy, fake, caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    body = {"model": MODEL, "max_tokens": 16, "messages": HELLO, "stream": True}
    got = b""
    with httpx.stream(
        "POST", proxy + "/v1/messages", json=body, headers={"x-fake-linger": "2"}
    ) as r:
        for chunk in r.iter_raw():
            got += chunk
            if b"event: message_stop" in got:
                break  # and close, while the upstream still lingers
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [r for r in caplog.records if r.name == "proxy.request"]
        if lines:
            break
        time.sleep(0.05)
    assert lines[-1].fields["status"] == 200
    assert "client_disconnected" not in lines[-1].fields


def test_upstream_down_is_an_anthropic_api_error_with_our_status():
    with faulty.refused() as down, ExitStack() as stack:
        url = stack.enter_context(
            serve(create_app(Settings(upstream_url=down.url, discover_window=False)))
        )
        with sdk(url) as client, pytest.raises(anthropic.InternalServerError) as info:
            client.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
    assert info.value.status_code == 502
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error" and body["error"]["message"]


def test_upstream_dying_mid_stream_is_an_in_band_anthropic_error_event(proxy, fake):
    body = {"model": MODEL, "max_tokens": 16, "messages": HELLO, "stream": True}
    r = httpx.post(proxy + "/v1/messages", json=body, headers={"x-fake-drop-after": "3"})
    assert r.status_code == 200
    *events, last = r.content.split(b"\n\n")[:-1]
    assert len(events) == 3
    assert last.startswith(b'event: error\ndata: {"type":"error","error":{"type":"api_error",')
    with (
        sdk(proxy) as client,
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(
            model=MODEL, max_tokens=16, messages=HELLO, extra_headers={"x-fake-drop-after": "3"}
        ) as stream,
    ):
        for _ in stream:
            pass
    assert isinstance(info.value.body, dict) and info.value.body["error"]["type"] == "api_error"


def test_upstream_errors_are_relayed_verbatim(proxy, fake):
    r = httpx.post(
        proxy + "/v1/messages",
        json={"model": MODEL, "max_tokens": 16, "messages": HELLO},
        headers={"x-fake-status": "529"},
    )
    assert r.status_code == 529
    assert r.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "fake upstream error 529"},
    }
