"""Socket-level upstream faults against the real proxy: what the client sees, what is released.

Before the response headers, every fault is an OpenAI-shaped 502 or 504. After them, an event
stream gets one in-band `data: {"error": ...}` event and a clean end; any other body is cut off
(the connection drops), so a client never takes a truncated body for a complete one. In each case
the proxy's connection to the upstream is released (the fault server sees it close).

The in-process proxy (`start_proxy`) serves the single-fault tests; tests/test_faults_process.py
runs the proxy as its own process for memory, leaks under load, and SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
import warnings
from collections.abc import Callable

import httpx
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.sse import MAX_PARTIAL_EVENT, EventFramer
from proxy.transport import transport_for
from proxy.upstream import Timeouts, Upstream
from tests.fakes import faulty

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
FAST = {"connect_timeout": 1.0, "first_byte_timeout": 0.5, "idle_timeout": 0.5}
BODY = orjson.dumps({**CHAT, "stream": True})
SLOW_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def post(url: str, *, stream: bool) -> tuple[httpx.Response, bytes, Exception | None]:
    """The response, the body bytes read, and the error that ended reading (None: clean end)."""
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10
    ) as r:
        body = b""
        try:
            for part in r.iter_raw():
                body += part
        except httpx.HTTPError as exc:
            return r, body, exc
        return r, body, None


def sse_payloads(body: bytes) -> list[object]:
    """Every event's data, parsed; a payload that is not JSON fails the test."""
    out: list[object] = []
    for ev in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not ev.strip():
            continue
        data = b"\n".join(line[5:].strip() for line in ev.split(b"\n") if line.startswith(b"data:"))
        out.append(data.decode() if data == b"[DONE]" else orjson.loads(data))
    return out


def wait_until(cond: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


BEFORE_HEADERS = {
    "refused": (faulty.refused, 502, "upstream_unavailable"),
    "reset_on_accept": (lambda: faulty.resetting(read_first=False), 502, "upstream_unavailable"),
    "reset_after_request": (faulty.resetting, 502, "upstream_unavailable"),
    "never_answers": (faulty.silent, 504, "upstream_timeout"),
    "closes_without_answer": (lambda: faulty.malformed(b""), 502, "upstream_unavailable"),
    "half_a_status_line": (lambda: faulty.malformed(b"HTTP/1.1 2"), 502, "upstream_unavailable"),
    "not_http": (lambda: faulty.malformed(b"SSH-2.0-OpenSSH\r\n\r\n"), 502, "upstream_unavailable"),
    "bad_content_length": (
        lambda: faulty.malformed(b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\nxx"),
        502,
        "upstream_unavailable",
    ),
    "header_without_colon": (
        lambda: faulty.malformed(b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n"),
        502,
        "upstream_unavailable",
    ),
    "headers_slower_than_first_byte_timeout": (
        lambda: faulty.slow(SLOW_HEAD, 0.02),
        504,
        "upstream_timeout",
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fault", BEFORE_HEADERS, ids=list(BEFORE_HEADERS))
def test_fault_before_headers_is_openai_shaped_5xx(start_proxy, fault, stream):
    make, status, code = BEFORE_HEADERS[fault]
    with make() as up:
        url = start_proxy(upstream_url=up.url, **FAST)
        r, body, cut = post(url, stream=stream)
        assert cut is None
        assert r.status_code == status, body
        assert r.headers["content-type"] == "application/json"
        err = orjson.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["code"] == code and err["type"] == "upstream_error"
        assert "Traceback" not in err["message"]
        # Whatever the fault, the proxy's end of the upstream connection is closed.
        assert wait_until(lambda: up.open == 0), f"{up.open} upstream connections left open"


AFTER_HEADERS = {
    "stalls": (lambda: faulty.stalling(2), "upstream_timeout"),
    "closes_without_last_chunk": (lambda: faulty.truncating(2), "upstream_unavailable"),
    "resets_mid_stream": (lambda: faulty.truncating(2, reset=True), "upstream_unavailable"),
    "closes_mid_event": (
        lambda: faulty.truncating(2, partial=b'data: {"object":"chat.comp'),
        "upstream_unavailable",
    ),
    "bad_chunk_header": (
        lambda: faulty.malformed(
            faulty.SSE_HEAD + faulty.chunk(faulty.event(0)) + faulty.chunk(faulty.event(1)) + b"zz"
        ),
        "upstream_unavailable",
    ),
}


@pytest.mark.parametrize("fault", AFTER_HEADERS, ids=list(AFTER_HEADERS))
def test_fault_after_headers_is_one_in_band_error_event_and_clean_end(start_proxy, fault):
    make, code = AFTER_HEADERS[fault]
    with make() as up:
        url = start_proxy(upstream_url=up.url, **FAST)
        r, body, cut = post(url, stream=True)
        assert cut is None, cut  # the stream ends cleanly (terminating chunk sent)
        if fault == "bad_chunk_header" and r.status_code == 502:
            # The aiohttp transport parses a bad chunk that arrives in the same read as the
            # headers before answering: then the fault is one before headers, a clean 502.
            assert orjson.loads(body)["error"]["code"] == code
            assert wait_until(lambda: up.open == 0)
            return
        assert r.status_code == 200
        assert r.headers["x-fault"] == "yes"
        payloads = sse_payloads(body)  # every event parses: the error never lands mid-event
        assert [p["choices"][0]["delta"]["content"] for p in payloads[:2]] == ["tok0 ", "tok1 "]
        assert len(payloads) == 3
        err = payloads[2]["error"]
        assert err["code"] == code and err["type"] == "upstream_error"
        assert wait_until(lambda: up.open == 0)


def test_sdk_raises_api_error_when_upstream_dies_mid_event(start_proxy):
    """The real SDK must get the in-band error, not a JSON error on a half event."""
    with faulty.truncating(2, partial=b'data: {"object":"chat.completion.chu') as up:
        url = start_proxy(upstream_url=up.url, **FAST)
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="m", messages=CHAT["messages"], stream=True
            )
            got = []
            with pytest.raises(openai.APIError) as info:
                for c in stream:
                    got.append(c.choices[0].delta.content)
    assert got == ["tok0 ", "tok1 "]
    assert "mid-response" in str(info.value)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: faulty.short_body(declared=1000, sent=100),
        lambda: faulty.truncating(2, content_type=b"application/json"),
    ],
    ids=["content_length", "chunked"],
)
def test_truncated_non_stream_body_is_never_passed_off_as_complete(start_proxy, make, path):
    """Either the proxy read the body whole and says 502, or the client sees the cut."""
    with make() as up:
        url = start_proxy(upstream_url=up.url, **FAST)
        with httpx.stream("POST", url + path, json=CHAT, timeout=10) as r:
            if r.status_code == 502:
                assert r.read() and r.json()["error"]["code"] == "upstream_unavailable"
            else:
                assert r.status_code == 200
                with pytest.raises(httpx.RemoteProtocolError):
                    r.read()
        assert wait_until(lambda: up.open == 0)


def test_slow_but_steady_upstream_is_relayed_intact(start_proxy):
    """Byte by byte, each gap under the idle timeout: the client gets exactly the upstream bytes."""
    body = b'data: {"a": 1}\n\ndata: {"b": "\xc3\xa9"}\n\ndata: [DONE]\n\n'
    response = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with faulty.slow(response, 0.003) as up:
        url = start_proxy(upstream_url=up.url, connect_timeout=1.0, idle_timeout=0.5)
        r, got, cut = post(url, stream=True)
    assert (r.status_code, cut, got) == (200, None, body)


def test_malformed_sse_bytes_are_relayed_unchanged(start_proxy):
    """Not UTF-8, CR-only and CRLF framing, comments, no final blank line: relayed as bytes."""
    body = (
        b": comment\r\ndata: \xff\xfe\x00raw\r\r\revent: x\r\ndata: {half\n\ndata: tail-without-end"
    )
    response = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with faulty.malformed(response) as up:
        url = start_proxy(upstream_url=up.url, **FAST)
        r, got, cut = post(url, stream=True)
    assert (r.status_code, cut, got) == (200, None, body)


def test_upstream_error_on_a_stream_request_is_relayed_before_any_event(proxy_url, upstream):
    """A stream: true request the upstream refuses gets the upstream's status and JSON body."""
    for status in (400, 429, 500):
        direct = httpx.post(
            upstream.url + "/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"x-fake-status": str(status)},
        )
        r = httpx.post(
            proxy_url + "/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"x-fake-status": str(status)},
        )
        assert (r.status_code, r.content) == (status, direct.content)
        assert r.headers["content-type"] == "application/json"


def test_client_leaving_while_upstream_stalls_mid_stream_releases_upstream(start_proxy):
    """Headers and two events, then silence: a client that gives up must free the upstream now,
    not after the idle timeout (300 s by default)."""
    with faulty.stalling(2) as up:
        url = start_proxy(upstream_url=up.url)
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            body = orjson.dumps({**CHAT, "stream": True})
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json"
                + f"\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            seen = b""
            while seen.count(b"data:") < 2:
                seen += s.recv(65536)
        assert up.peer_closed.wait(3), "the proxy kept the stalled upstream open"
        assert wait_until(lambda: up.open == 0)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_cancelled_opens_do_not_leak_pool_slots(transport):
    """Clients that leave while the proxy is connecting must not use up `max_connections`.

    Cancels 800 opens at every point from "before connect" to "waiting for headers"; httpcore
    alone strands a connection now and then (encode/httpcore#1093). Afterwards all SLOTS
    connections must still be available at once; a stranded one makes the last open time out.
    """
    slots = 64

    async def storm(url: str) -> list[int]:
        upstream = Upstream(
            url,
            api_key=None,
            timeouts=Timeouts(2, 2, 2, 2),
            max_connections=slots,
            transport=transport_for(transport, slots),
        )
        target = upstream.targets.url("/v1/chat/completions", b"")
        headers = [("content-type", "application/json")]

        async def cancelled(i: int) -> None:
            task = asyncio.create_task(upstream.open("POST", target, headers, BODY))
            for _ in range(i % 40):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ProxyError):
                resp = await task
                await resp.aclose()

        async def status() -> int:
            try:
                return (await upstream.open("POST", target, headers, BODY)).status_code
            except ProxyError as exc:
                return exc.status

        try:
            await asyncio.gather(*(cancelled(i) for i in range(800)))
            # Every slot at once, each response held open until all have answered.
            return await asyncio.gather(*(status() for _ in range(slots)))
        finally:
            await upstream.aclose()

    with faulty.sse(events=1, head_delay=0.05) as up:
        statuses = asyncio.run(storm(up.url))
        assert statuses == [200] * slots, sorted(statuses)
        assert wait_until(lambda: up.open == 0)
    # aiohttp leaves the Connection wrapper of a connect cancelled mid-way to the garbage
    # collector, which warns that it was never closed (the pool slot itself is freed, as the
    # assertions above check). Collected here, not in whichever later test the collector
    # happens to run in, where pytest would report the warning against that test.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed connection", ResourceWarning)
        gc.collect()


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    ends=st.lists(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]), min_size=1),
    tail=st.binary(max_size=20),
    cuts=st.lists(st.integers(1, 25), min_size=1),
)
def test_event_framer_passes_every_byte_and_cuts_only_at_event_ends(events, ends, tail, cuts):
    """However the upstream's bytes are split, the relay sends the same bytes, whole events at
    a time (only the upstream's own unterminated tail comes last, as it is)."""
    stream = b"".join(b"data: " + e + ends[i % len(ends)] for i, e in enumerate(events)) + tail
    framer, out, i, k = EventFramer(), b"", 0, 0
    while i < len(stream):
        piece = stream[i : i + cuts[k % len(cuts)]]
        i, k = i + len(piece), k + 1
        got = framer.feed(piece)
        assert not got or got.endswith((b"\n\n", b"\r\n\r\n", b"\r\r"))
        out += got
    assert out + framer.flush() == stream


def test_event_framer_never_holds_more_than_the_cap():
    framer = EventFramer()
    sent = sum(len(framer.feed(b"x" * 65536)) for _ in range(40))  # 2.5 MB, no blank line
    assert sent >= 40 * 65536 - MAX_PARTIAL_EVENT - 65536
    assert framer.in_event


def test_a_kept_alive_connection_closed_under_a_request_is_resent_once(start_proxy):
    """The upstream closes an idle kept-alive connection just as the next request goes out on
    it (llama-server's and uvicorn's 5 s keep-alive timeout, met on a real server by
    bench.billing_reuse): the request is sent again on a new connection, not failed with 502.
    A new connection's failure is not resent."""
    with faulty.closing_idle(0.3) as up:
        url = start_proxy(upstream_url=up.url, discover_window=False)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=5) as client:
            for _ in range(3):  # each one after the first meets the closing connection
                r = client.post(url + "/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["message"]["content"] == "ok"
        assert len(up.requests) == 3 and up.accepted >= 3
    with faulty.malformed(b"") as up:  # a new connection closed without an answer
        url = start_proxy(upstream_url=up.url, discover_window=False)
        r, _, _ = post(url, stream=False)
        assert r.status_code == 502 and up.accepted == 1
