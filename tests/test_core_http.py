"""The proxy core over real loopback HTTP: pass-through, headers, errors, streaming."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest

from tests.fakes.server import serve
from tests.fakes.upstream import FakeUpstream

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def assert_openai_error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def test_body_reaches_upstream_byte_for_byte(proxy_url, upstream):
    # Odd spacing, key order, unicode escapes and unknown fields: all must survive untouched.
    raw = (
        b'{ "model":"fake-model",  "messages":[{"role":"user","content":"h\\u00e9llo"}],'
        b'"x_unknown_field": {"nested": [1, 2.50, null]}, "temperature": 0.0 }'
    )
    r = httpx.post(
        proxy_url + "/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "x-shrink-mode": "off"},
    )
    assert r.status_code == 200, r.text
    assert upstream.last.body == raw
    assert upstream.last.path == "/v1/chat/completions"


def test_passthrough_preserves_method_path_query_and_body(proxy_url, upstream):
    r = httpx.post(proxy_url + "/v1/embeddings?foo=1&bar=%20x", content=b"\x00\x01binary")
    assert r.status_code == 200
    assert r.json() == {
        "method": "POST",
        "path": "/v1/embeddings",
        "query": "foo=1&bar=%20x",
        "body_len": 8,
    }
    assert upstream.last.body == b"\x00\x01binary"
    assert r.headers["x-echo"] == "1"
    assert r.headers["set-cookie"] == "a=1"
    r = httpx.get(proxy_url + "/v1/models")
    assert r.json()["data"][0]["id"] == "fake-model"
    r = httpx.delete(proxy_url + "/v1/files/file-abc")
    assert r.json()["method"] == "DELETE"
    assert upstream.last.path == "/v1/files/file-abc"


def test_upstream_base_path_is_respected(start_proxy, upstream):
    url = start_proxy(upstream_url=upstream.url + "/prefix/v1")
    r = httpx.get(url + "/v1/anything/here?q=1")
    assert r.json()["path"] == "/prefix/v1/anything/here"
    assert upstream.last.query == b"q=1"


def test_headers_pass_through_and_hop_by_hop_are_stripped(proxy_url, upstream):
    r = httpx.post(
        proxy_url + "/v1/chat/completions",
        json=CHAT,
        headers={
            "authorization": "Bearer client-key",
            "HTTP-Referer": "https://example.org/app",
            "X-Title": "My Agent",
            "connection": "keep-alive, x-secret-hop",
            "x-secret-hop": "must-not-pass",
            "keep-alive": "timeout=5",
            "te": "trailers",
        },
    )
    assert r.status_code == 200
    rec = upstream.last
    assert rec.header("authorization") == "Bearer client-key"
    assert rec.header("http-referer") == "https://example.org/app"
    assert rec.header("x-title") == "My Agent"
    assert rec.header("x-secret-hop") is None
    assert rec.header("keep-alive") is None
    assert rec.header("te") is None
    assert rec.header("host") == upstream.url.removeprefix("http://")
    # The proxy adds a request id upstream when the client sent none, and returns it.
    rid = rec.header("x-request-id")
    assert rid and rid.startswith("shrink-")
    assert r.headers["x-request-id"] == rid
    assert r.headers["x-upstream-marker"] == "yes"


def test_client_request_id_is_kept(proxy_url, upstream):
    r = httpx.post(
        proxy_url + "/v1/chat/completions", json=CHAT, headers={"x-request-id": "abc-123"}
    )
    assert upstream.last.header("x-request-id") == "abc-123"
    assert r.headers["x-request-id"] == "abc-123"


def test_configured_upstream_key_replaces_client_key(start_proxy, upstream):
    url = start_proxy(upstream_api_key="sk-real-upstream")
    httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer dummy"})
    assert upstream.last.header("authorization") == "Bearer sk-real-upstream"
    # Azure clients send api-key: the configured key replaces it in the same header too.
    httpx.post(
        url + "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
        json=CHAT,
        headers={"api-key": "dummy"},
    )
    assert upstream.last.header("api-key") == "sk-real-upstream"
    assert upstream.last.header("authorization") == "Bearer sk-real-upstream"


def test_azure_paths_are_forwarded_with_query(proxy_url, upstream):
    r = httpx.post(
        proxy_url + "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21",
        json=CHAT,
        headers={"api-key": "azure-client-key"},
    )
    assert r.status_code == 200, r.text
    rec = upstream.last
    assert rec.path == "/openai/deployments/my-gpt/chat/completions"
    assert rec.query == b"api-version=2024-10-21"
    assert rec.header("api-key") == "azure-client-key"
    httpx.post(proxy_url + "/openai/v1/chat/completions", json=CHAT)
    assert upstream.last.path == "/openai/v1/chat/completions"


def test_healthz_and_readyz(proxy_url, start_proxy):
    assert httpx.get(proxy_url + "/healthz").json() == {"status": "ok"}
    r = httpx.get(proxy_url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    dead = start_proxy(upstream_url="http://127.0.0.1:1/v1")
    r = httpx.get(dead + "/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "unavailable"


@pytest.mark.parametrize(
    ("content", "ctype", "status", "code"),
    [
        (b"{not json", "application/json", 400, None),
        (b"", "application/json", 400, None),
        (b"[1, 2]", "application/json", 400, None),
        (b'{"model": "m"}', "application/json", 400, None),
        (b'{"model": "m", "messages": []}', "application/json", 400, None),
        (b'{"model": "m", "messages": ["x"]}', "application/json", 400, None),
        (b'{"model": "m", "messages": [{"content": "no role"}]}', "application/json", 400, None),
        (
            b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}',
            "application/json",
            400,
            None,
        ),
        (b"\xff\xfe not utf-8", "application/json", 400, None),
        (b"a=1&b=2", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
        (b"[" * 300 + b"]" * 300, "application/json", 400, None),
    ],
)
def test_bad_chat_bodies_get_openai_shaped_400(proxy_url, upstream, content, ctype, status, code):
    r = httpx.post(
        proxy_url + "/v1/chat/completions", content=content, headers={"content-type": ctype}
    )
    err = assert_openai_error(r, status, code)
    assert err["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_deep_messages_are_refused(proxy_url, upstream):
    deep = b'{"role":"user","content":' + b"[" * 400 + b"]" * 400 + b"}"
    r = httpx.post(proxy_url + "/v1/chat/completions", content=b'{"messages":[' + deep + b"]}")
    assert_openai_error(r, 400)
    assert upstream.requests == []


def test_body_over_limit_gets_413(start_proxy, upstream):
    url = start_proxy(max_body_bytes=2048)
    big = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]})
    r = httpx.post(url + "/v1/chat/completions", content=big)
    assert_openai_error(r, 413, "request_too_large")

    # Without Content-Length (chunked upload) the limit still holds.
    def gen():
        for _ in range(10):
            yield b"x" * 1000

    r = httpx.post(url + "/v1/embeddings", content=gen())
    assert_openai_error(r, 413, "request_too_large")
    assert upstream.requests == []


def test_unknown_route_is_openai_shaped_404(proxy_url):
    r = httpx.get(proxy_url + "/nope")
    err = assert_openai_error(r, 404, "unknown_url")
    assert "detail" not in r.text
    assert "/nope" in err["message"]
    r = httpx.get(proxy_url + "/v1/chat/completions")
    assert r.status_code in (404, 405) or r.status_code == 200  # GET is passed through to upstream


def test_upstream_unreachable_is_502(start_proxy):
    url = start_proxy(upstream_url="http://127.0.0.1:1/v1")
    r = httpx.post(url + "/v1/chat/completions", json=CHAT)
    assert_openai_error(r, 502, "upstream_unavailable")
    r = httpx.get(url + "/v1/models")
    assert_openai_error(r, 502, "upstream_unavailable")


def test_upstream_timeout_is_504(start_proxy, upstream):
    url = start_proxy(first_byte_timeout=0.3)
    t0 = time.monotonic()
    r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"x-fake-hang": "1"})
    assert_openai_error(r, 504, "upstream_timeout")
    # The configured 0.3 s applied, not the 600 s default (loose: CI machines are loaded).
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
def test_upstream_errors_are_relayed_verbatim(proxy_url, upstream, status):
    direct = httpx.post(
        upstream.url + "/v1/chat/completions", json=CHAT, headers={"x-fake-status": str(status)}
    )
    r = httpx.post(
        proxy_url + "/v1/chat/completions", json=CHAT, headers={"x-fake-status": str(status)}
    )
    assert r.status_code == status
    assert r.content == direct.content
    assert r.headers["x-upstream-marker"] == "yes"


def test_streaming_relays_each_event_before_the_next_is_sent(proxy_url, upstream):
    """Each event reaches the client before the upstream even sends the next one (no buffering).

    Both clocks are the same time.monotonic() (the fake runs in this process), so the check
    does not depend on how loaded the machine is.
    """
    arrivals = []
    with httpx.stream(
        "POST",
        proxy_url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-fake-chunks": "4", "x-fake-chunk-delay": "0.3"},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    sent = upstream.sent_times
    assert len(sent) == 4 and len(arrivals) == 6  # 4 deltas, the final chunk, [DONE]
    for i in range(3):
        assert arrivals[i] < sent[i + 1], (i, arrivals, sent)


def test_streaming_bytes_are_identical_to_upstream(proxy_url, upstream):
    body = {**CHAT, "stream": True}
    direct = httpx.post(
        upstream.url + "/v1/chat/completions", json=body, headers={"x-fake-chunks": "7"}
    )
    via = httpx.post(proxy_url + "/v1/chat/completions", json=body, headers={"x-fake-chunks": "7"})
    assert via.content == direct.content


def test_client_disconnect_closes_upstream_at_once(proxy_url, upstream):
    with httpx.stream(
        "POST",
        proxy_url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-fake-chunks": "1000", "x-fake-chunk-delay": "0.05"},
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    assert upstream.cancelled_event.wait(3), "upstream stream was not closed"
    assert upstream.streams_completed == 0


def test_client_disconnect_while_upstream_is_silent(proxy_url, upstream):
    """The upstream has not answered yet: the proxy must still drop the upstream request."""
    body = orjson.dumps(CHAT)
    host, port = proxy_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-fake-hang: 1\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        deadline = time.monotonic() + 10
        while not upstream.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert upstream.requests, "the request never reached the upstream"
    assert upstream.cancelled_event.wait(5), "the upstream request was not dropped"


def test_upstream_drop_mid_stream_gives_in_band_error(proxy_url, upstream):
    r = httpx.post(
        proxy_url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-fake-chunks": "5", "x-fake-drop-after": "2"},
    )
    assert r.status_code == 200
    frames = [line for line in r.text.split("\n\n") if line]
    assert len(frames) == 3
    err = orjson.loads(frames[-1].removeprefix("data: "))
    assert err["error"]["code"] == "upstream_unavailable"


def test_idle_timeout_mid_stream_gives_in_band_error(start_proxy, upstream):
    url = start_proxy(idle_timeout=0.3)
    r = httpx.post(
        url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-fake-chunks": "3", "x-fake-chunk-delay": "2"},
        timeout=10,
    )
    frames = [f for f in r.text.split("\n\n") if f]
    err = orjson.loads(frames[-1].removeprefix("data: "))
    assert err["error"]["code"] == "upstream_timeout"


def test_malformed_sse_is_relayed_as_bytes(proxy_url, upstream):
    raw = "data: {broken json\\n\\nevent: weird\\ndata: x\\n\\n"
    r = httpx.post(
        proxy_url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-fake-raw-sse": raw},
    )
    assert r.status_code == 200
    assert r.content == b"data: {broken json\n\nevent: weird\ndata: x\n\n"


def raw_request(base_url: str, request_line_and_headers: bytes) -> tuple[int, bytes]:
    """Send bytes exactly as given (clients like httpx would normalise the path first)."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(request_line_and_headers)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize(
    "target",
    [
        b"/v1/../admin",
        b"/v1/%2e%2e/admin",
        b"/v1/%2E%2E/%2e%2e/etc/passwd",
        b"/v1/a%2Fb",
        b"/v1/a%5cb",
        b"/v1/./x",
        b"//evil.example/v1/models",
        b"/v1/models%0d%0aX-Injected:%201",
    ],
)
def test_path_tricks_never_leave_the_base(proxy_url, upstream, target):
    status, body = raw_request(
        proxy_url, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status in (400, 404), body
    err = orjson.loads(body)["error"]
    assert err["message"] and "type" in err
    assert upstream.requests == []


def test_absolute_form_target_goes_only_to_the_configured_upstream(proxy_url, upstream):
    status, _ = raw_request(
        proxy_url,
        b"GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n"
        b"Connection: close\r\n\r\n",
    )
    assert status == 200
    assert upstream.last.path == "/v1/models"
    assert upstream.last.header("host") == upstream.url.removeprefix("http://")


def test_header_injection_is_refused_before_upstream(proxy_url, upstream):
    # A raw CR/LF inside a header value is a protocol error for the server; nothing goes upstream.
    status, _ = raw_request(
        proxy_url,
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\rX-Injected: 1\r\nConnection: close\r\n\r\n",
    )
    assert status == 400
    assert upstream.requests == []


def test_host_header_cannot_redirect(proxy_url, upstream):
    other = FakeUpstream()
    with serve(other.app()) as other_url:
        r = httpx.get(proxy_url + "/v1/models", headers={"host": other_url.removeprefix("http://")})
        assert r.status_code == 200
        assert other.requests == []
        assert len(upstream.requests) == 1


def test_credentials_in_the_upstream_url_become_basic_auth(start_proxy, upstream):
    host = upstream.url.removeprefix("http://")
    url = start_proxy(upstream_url=f"http://user:p%40ss@{host}/v1")
    r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer c"})
    assert r.status_code == 200
    assert upstream.last.header("authorization") == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert upstream.last.header("host") == host
