"""Hostile HTTP at the proxy's front door, sent byte for byte over raw sockets.

Header injection through CR/LF/NUL, request smuggling with Transfer-Encoding and Content-Length,
enormous request lines and headers, absolute URIs and Host headers aimed at another server.
Whatever the server's parser decides (often a 400 before the app sees anything), nothing may
reach another host, a path outside the upstream base, or the upstream in a second, smuggled
request; nothing injected may come back as a response header; and no answer is a 5xx.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.server import serve
from tests.fakes.upstream import FakeUpstream

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request: pytest.FixtureRequest, fake: FakeUpstream) -> Iterator[tuple[str, str]]:
    """The proxy under each of uvicorn's HTTP parsers: they differ on malformed input.

    httptools (llhttp) is what the runtime install runs (pyproject); h11 is uvicorn's fallback when
    httptools is not installed.
    """
    upstream_url = fake.url + "/v1"  # type: ignore[attr-defined]
    settings = Settings(upstream_url=upstream_url, discover_window=False)
    with serve(create_app(settings), http=request.param) as url:
        yield url, request.param


@pytest.fixture
def front(edge: tuple[str, str], upstream: FakeUpstream) -> tuple[str, FakeUpstream]:
    """The module's proxy, with the fake upstream's record emptied for this test."""
    return edge[0], upstream


def exchange(url: str, data: bytes, timeout: float = 3.0) -> list[tuple[int, bytes]]:
    """Send raw bytes, read until the server closes (or goes quiet): (status, head) per response."""
    host, port = url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        try:
            while chunk := s.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    out = []
    for part in received.split(b"HTTP/1.1 ")[1:]:
        head = part.split(b"\r\n\r\n", 1)[0]
        out.append((int(head[:3]), head))
    return out


def header_names(head: bytes) -> set[bytes]:
    return {line.split(b":", 1)[0].strip().lower() for line in head.split(b"\r\n")[1:]}


@pytest.mark.parametrize(
    "value",
    [
        b"abc\nX-Injected: 1",  # bare LF
        b"abc\rX-Injected: 1",  # bare CR
        b"abc\r\n X-Injected: 1",  # obs-fold continuation
        b"abc\x00X-Injected: 1",  # NUL
        b"abc%0d%0aX-Injected:%201",  # percent-encoded: a legal value, never decoded
    ],
    ids=["lf", "cr", "obs_fold", "nul", "percent"],
)
def test_request_id_cannot_inject_headers(front, value):
    url, upstream = front
    responses = exchange(
        url,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Request-Id: " + value + b"\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(CHAT) + CHAT,
    )
    assert responses, "no answer at all"
    for status, head in responses:
        assert status < 500, head
        assert b"x-injected" not in header_names(head), head
        echoed = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"x-request-id:")]
        assert all(b"\r" not in e and b"\n" not in e and b"\x00" not in e for e in echoed)
    for rec in upstream.requests:
        rid = rec.header("x-request-id") or ""
        assert not set(rid) & {"\r", "\n", "\x00"}, rid
    if value.startswith(b"abc%0d"):
        assert upstream.last.header("x-request-id") == value.decode()


SMUGGLED = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        # CL.TE: the front end reads by length, a back end by chunks (or the reverse).
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (5 + len(SMUGGLED)) + SMUGGLED,
        # TE.CL: the chunk carries the smuggled request, the length stops before it.
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n",
        # TE obfuscated: a second Transfer-Encoding header, an unknown coding.
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n"
        % (5 + len(SMUGGLED))
        + SMUGGLED,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n"
        b"Content-Length: %d\r\n\r\n0\r\n\r\n" % (5 + len(SMUGGLED)) + SMUGGLED,
        # Two different lengths.
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        b"Content-Length: %d\r\n\r\n" % len(SMUGGLED) + SMUGGLED,
    ],
    ids=["cl_te", "te_cl", "te_te", "te_unknown", "cl_cl"],
)
def test_smuggling_never_reaches_the_upstream(edge, upstream, request_bytes):
    url, parser = edge
    responses = exchange(url, request_bytes)
    assert all(status < 500 for status, _ in responses), responses
    paths = [rec.path for rec in upstream.requests]
    if parser == "httptools":
        # llhttp refuses every ambiguous framing outright.
        assert [status for status, _ in responses] == [400]
        assert paths == []
    else:
        # h11 lets Transfer-Encoding win over Content-Length (RFC 9112 6.3) and reads what
        # follows as a second, pipelined request of the same client: it stays under the base.
        assert all(p.startswith("/v1/") for p in paths), paths
    for rec in upstream.requests:
        # Whatever the client sent, the upstream gets one framing that matches the body.
        assert rec.header("transfer-encoding") is None
        assert [k for k, _ in rec.headers if k.lower() == "content-length"] in (
            [],
            ["content-length"],
        )
        assert int(rec.header("content-length") or 0) == len(rec.body)


def test_huge_request_line_and_header_are_refused_or_confined(front):
    url, upstream = front
    long_path = b"/v1/" + b"a" * 100_000
    for data in (
        b"GET " + long_path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 1_000_000 + b"\r\n"
        b"Connection: close\r\n\r\n",
        b"GET /v1/models?"
        + b"q=1&" * 50_000
        + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ):
        for status, head in exchange(url, data, timeout=10):
            assert status < 500, head[:200]
    assert all(rec.path.startswith("/v1/") for rec in upstream.requests)


def test_absolute_uri_and_host_aimed_elsewhere_reach_only_the_upstream(front):
    url, upstream = front
    other = FakeUpstream()
    with serve(other.app()) as other_url:
        other_host = other_url.removeprefix("http://").encode()
        for data in (
            b"GET "
            + other_url.encode()
            + b"/v1/models HTTP/1.1\r\nHost: "
            + other_host
            + b"\r\nConnection: close\r\n\r\n",
            b"GET http://user:pw@"
            + other_host
            + b"/v1/models HTTP/1.1\r\nHost: "
            + other_host
            + b"\r\nConnection: close\r\n\r\n",
            b"CONNECT "
            + other_host
            + b" HTTP/1.1\r\nHost: "
            + other_host
            + b"\r\nConnection: close\r\n\r\n",
            b"GET /v1/models HTTP/1.1\r\nHost: "
            + other_host
            + b"\r\nX-Forwarded-Host: "
            + other_host
            + b"\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n"
            b"Forwarded: host=" + other_host + b"\r\nConnection: close\r\n\r\n",
        ):
            for status, head in exchange(url, data):
                assert status < 500, head
        assert other.requests == []
    assert upstream.requests, "the legitimate requests should have reached the upstream"
    assert {rec.path for rec in upstream.requests} == {"/v1/models"}
    upstream_host = upstream.url.removeprefix("http://")  # type: ignore[attr-defined]
    assert {rec.header("host") for rec in upstream.requests} == {upstream_host}


def test_query_with_encoded_crlf_is_forwarded_encoded_not_decoded(front):
    url, upstream = front
    r = httpx.get(url + "/v1/models?x=%0d%0aSet-Cookie:%20a=1")
    assert r.status_code == 200
    assert "set-cookie" not in r.headers
    # Still percent-encoded (the aiohttp transport normalises the hex digits' case, which
    # RFC 3986 section 6.2.2.1 makes equivalent); never decoded into a CR/LF.
    assert upstream.last.query.lower() == b"x=%0d%0aset-cookie:%20a=1"
    assert b"\r" not in upstream.last.query and b"\n" not in upstream.last.query
    assert upstream.last.header("set-cookie") is None


def test_request_body_fields_named_like_headers_stay_in_the_body(front):
    """A body is data: keys that look like routing never change where the request goes."""
    url, upstream = front
    body = orjson.loads(CHAT) | {"url": "http://evil.example/v1", "headers": {"host": "evil"}}
    r = httpx.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert upstream.last.path == "/v1/chat/completions"
    assert upstream.last.json()["url"] == "http://evil.example/v1"
