"""The figures the proxy reports must mean what they say: log lines, /stats, /metrics, /readyz.

Each test drives the proxy under uvicorn on loopback (a fake upstream or a backend-like fake
behind it) and checks one number that used to mislead (issue 21, item 7).
"""

from __future__ import annotations

import logging
import time

import httpx
import openai
import pytest

from tests.fakes.backends import FakeBackend
from tests.fakes.server import serve
from tests.test_observability_http import metric
from tests.test_windows_http import convo

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi there"}]}


def request_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [r.fields for r in caplog.records if r.name == "proxy.request"]  # type: ignore[attr-defined]


def wait_for_requests(url: str, n: int) -> dict:
    """/stats once `n` requests have ended (a relay logs after the client has its bytes)."""
    deadline = time.monotonic() + 10
    while True:
        s = httpx.get(f"{url}/stats").json()
        if s["totals"]["requests"] >= n or time.monotonic() > deadline:
            return s
        time.sleep(0.02)


def test_a_stream_read_to_its_done_and_closed_is_complete_not_a_disconnect(proxy_url, caplog):
    """A client that exits after `data: [DONE]` while the upstream has not yet ended its body
    had everything: 9 of 10 "disconnects" on the dashboard were such requests."""
    caplog.set_level(logging.INFO, logger="proxy.request")
    body = {**CHAT, "stream": True}
    with httpx.Client(timeout=10) as client:
        with client.stream(
            "POST",
            f"{proxy_url}/v1/chat/completions",
            json=body,
            headers={"x-fake-linger": "3"},
        ) as r:
            got = []
            for line in r.iter_lines():
                got.append(line)
                if line == "data: [DONE]":
                    break  # and leave: the response is closed with the upstream still open
    assert got[-1] == "data: [DONE]"
    s = wait_for_requests(proxy_url, 1)
    assert s["totals"]["client_disconnects"] == 0
    assert s["recent"][0]["client_disconnected"] is False and s["recent"][0]["status"] == 200
    assert "client_disconnected" not in request_lines(caplog)[-1]
    text = httpx.get(f"{proxy_url}/metrics").text
    assert metric(text, "shrink_client_disconnects_total") == 0


def test_the_openai_sdk_closing_after_done_is_a_complete_request(proxy_url):
    """The real SDK (openai 1.x+ `Stream.__stream__`) breaks at `[DONE]` and closes the
    response at once, whatever the upstream still has to say."""
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0) as client:
        for _ in range(3):
            stream = client.chat.completions.create(
                model="fake-model",
                messages=CHAT["messages"],  # type: ignore[arg-type]
                stream=True,
                extra_headers={"x-fake-linger": "3"},
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    s = wait_for_requests(proxy_url, 3)
    assert s["totals"]["client_disconnects"] == 0
    assert [r["status"] for r in s["recent"]] == [200, 200, 200]


def test_a_client_that_leaves_mid_stream_is_still_a_disconnect(proxy_url):
    body = {**CHAT, "stream": True}
    with httpx.Client(timeout=10) as client:
        with client.stream(
            "POST",
            f"{proxy_url}/v1/chat/completions",
            json=body,
            headers={"x-fake-chunks": "20", "x-fake-chunk-delay": "0.1"},
        ) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
    s = wait_for_requests(proxy_url, 1)
    assert s["totals"]["client_disconnects"] == 1


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_refused_upstream_is_a_connect_error_not_a_timeout(start_proxy, transport):
    url = start_proxy(upstream_url="http://127.0.0.1:9/v1", upstream_transport=transport)
    r = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert "ConnectError" in message and "Timeout" not in message, message
    if transport == "aiohttp":
        assert "ConnectError: connection refused" in message
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 503 and ready.json()["reason"] == "ConnectError"


def test_mode_off_reports_no_budget(proxy_url, caplog):
    """Mode off plans for no window: the default budget it used to report was nobody's."""
    caplog.set_level(logging.INFO, logger="proxy.request")
    r = httpx.post(f"{proxy_url}/v1/chat/completions", json=CHAT, headers={"x-shrink-mode": "off"})
    assert r.status_code == 200
    assert "x-shrink-budget" not in r.headers
    assert r.headers["x-shrink-tokens-before"] == r.headers["x-shrink-tokens-after"]
    line = request_lines(caplog)[-1]
    assert line["mode"] == "off" and "budget" not in line
    auto = httpx.post(f"{proxy_url}/v1/chat/completions", json=CHAT)
    assert int(auto.headers["x-shrink-budget"]) > 0 and request_lines(caplog)[-1]["budget"] > 0


def test_the_log_line_of_an_overflow_retry_describes_the_plan_sent(caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    fake = FakeBackend("llamacpp", window=3000)
    with serve(fake.app()) as up:
        from proxy.app import create_app
        from proxy.settings import Settings

        settings = Settings(upstream_url=up + fake.prefix, discover_window=False)
        with serve(create_app(settings)) as px:
            body = {"model": fake.model, "messages": convo(40), "max_tokens": 256}
            r = httpx.post(px + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200 and r.headers["x-shrink-retried"] == "overflow"
            stats = httpx.get(px + "/stats").json()
    line = request_lines(caplog)[-1]
    assert line["retried"] == "overflow"
    assert line["budget"] == int(r.headers["x-shrink-budget"]) < 3000
    assert line["actions"] == r.headers["x-shrink-actions"]
    assert line["tokens_after"] == int(r.headers["x-shrink-tokens-after"])
    assert stats["recent"][0]["tokens_after"] == line["tokens_after"]


def test_pass_through_requests_name_their_model_or_none(proxy_url):
    assert httpx.post(
        f"{proxy_url}/v1/embeddings", json={"model": "emb-1", "input": "x"}
    ).is_success
    assert httpx.get(f"{proxy_url}/v1/models").is_success
    s = wait_for_requests(proxy_url, 2)
    models, embeddings = s["recent"]
    assert embeddings["model"] == "emb-1" and embeddings["route"] == "passthrough"
    assert models["model"] is None and models["path"] == "/v1/models"
    text = httpx.get(f"{proxy_url}/metrics").text
    assert metric(text, "shrink_requests_total", route="passthrough", model="emb-1") == 1
    assert metric(text, "shrink_requests_total", route="passthrough", model="none") == 1
    assert metric(text, "shrink_requests_total", model="unknown") == 0


def test_a_discovered_window_stays_in_stats_after_its_probe_is_due():
    fake = FakeBackend("vllm", window=3000)
    with serve(fake.app()) as up:
        from proxy.app import create_app
        from proxy.settings import Settings

        # A TTL shorter than the test: the entry is due for a new probe by the time /stats
        # is read, but it is still the window the next request would be planned for.
        settings = Settings(upstream_url=up + fake.prefix, discovery_ttl=0.2)
        with serve(create_app(settings)) as px:
            body = {"model": fake.model, "messages": convo(2), "max_tokens": 16}
            assert httpx.post(px + "/v1/chat/completions", json=body).status_code == 200
            time.sleep(0.4)
            stats = httpx.get(px + "/stats").json()
    assert stats["windows"] == {fake.model: 3000}
