"""Inbound key, key isolation, binding: who may use the proxy and which key reaches the upstream."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-proxy-inbound-7f3a"


@pytest.fixture
def keyed(start_proxy):
    return start_proxy(proxy_api_key=KEY, upstream_api_key="sk-upstream-real")


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"api-key": "wrong"}, {"authorization": KEY}],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/v1/shrink")],
)
def test_without_the_inbound_key_nothing_passes(keyed, upstream, headers, method, path):
    r = httpx.request(method, keyed + path, json=CHAT, headers=headers)
    assert r.status_code == 401
    err = r.json()["error"]
    assert err["code"] == "invalid_api_key" and err["type"] == "invalid_request_error"
    assert upstream.requests == []


@pytest.mark.parametrize("headers", [{"authorization": f"Bearer {KEY}"}, {"api-key": KEY}])
def test_with_the_inbound_key_the_upstream_gets_only_its_own_key(keyed, upstream, headers):
    r = httpx.post(keyed + "/v1/chat/completions", json=CHAT, headers=headers)
    assert r.status_code == 200, r.text
    sent = dict((k.lower(), v) for k, v in upstream.last.headers)
    assert sent["authorization"] == "Bearer sk-upstream-real"
    assert KEY not in str(upstream.last.headers)


def test_inbound_key_without_upstream_key_forwards_no_auth(start_proxy, upstream):
    url = start_proxy(proxy_api_key=KEY)
    r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"api-key": KEY})
    assert r.status_code == 200
    assert upstream.last.header("authorization") is None
    assert upstream.last.header("api-key") is None


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_upstream_cookies_never_reach_another_client(start_proxy, upstream, transport):
    """One proxy serves many clients: a session cookie the upstream gave one of them goes back
    to that client only (the proxy keeps no cookie jar), never out with someone else's request."""
    url = start_proxy(upstream_transport=transport)
    first = httpx.get(url + "/v1/models", headers={"x-fake-set-cookie": "session=alice-secret"})
    assert first.status_code == 200
    assert first.headers["set-cookie"] == "session=alice-secret"
    second = httpx.get(url + "/v1/models")
    assert second.status_code == 200
    assert upstream.last.header("cookie") is None
    assert "alice-secret" not in str(upstream.last.headers)


def test_sdk_with_inbound_key(keyed):
    with openai.OpenAI(base_url=keyed + "/v1", api_key=KEY, max_retries=0) as c:
        assert c.chat.completions.create(**CHAT).choices[0].message.content
    with openai.OpenAI(base_url=keyed + "/v1", api_key="nope", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError):
            c.chat.completions.create(**CHAT)


def test_health_endpoints_stay_open_and_say_nothing_of_the_upstream(start_proxy):
    url = start_proxy(proxy_api_key=KEY, upstream_url="http://127.0.0.1:1/v1")
    assert httpx.get(url + "/healthz").status_code == 200
    r = httpx.get(url + "/readyz")
    assert r.status_code == 503
    assert "127.0.0.1:1" not in r.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cli(*args: str, env_extra: dict | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, **(env_extra or {})}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--port",
            str(port),
            "--log-format",
            "text",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(proc.stdout.read() if proc.stdout else "proxy did not start")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def test_start_up_says_where_it_binds(upstream):
    proc, _ = start_cli("--upstream", upstream.url + "/v1")
    out = stop(proc)
    assert "bound to 127.0.0.1 only" in out


def test_public_bind_without_key_warns_loudly(upstream):
    proc, _ = start_cli("--host", "0.0.0.0", "--upstream", upstream.url + "/v1")
    out = stop(proc)
    assert "WITHOUT an inbound key" in out


def test_workers_serve_with_the_same_settings(upstream):
    proc, port = start_cli(
        "--workers",
        "2",
        "--upstream",
        upstream.url + "/v1",
        env_extra={"SHRINK_PROXY_API_KEY": KEY},
    )
    try:
        for _ in range(6):
            r = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT, headers={"api-key": KEY}
            )
            assert r.status_code == 200
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT)
        assert r.status_code == 401
    finally:
        stop(proc)
