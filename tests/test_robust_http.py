"""No request content and no bug in the pipeline ends in an HTTP 500 or a reset connection.

Over real HTTP (the proxy under uvicorn in front of the recording fake upstream): JSON nested
as deep as the parsers allow inside tool-call arguments and tool results, escapes that make no
character, and a pipeline that raises; each request still reaches the upstream, shrunk where it
can be.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import ProxyFactory
from tests.fakes.upstream import FakeUpstream


def nested_object(depth: int) -> str:
    return '{"a":' * depth + '"leaf"' + "}" * depth


def session(turns: int = 12) -> list[dict[str, Any]]:
    """A coding-agent conversation long enough to be trimmed at a 2k window."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        call = {
            "id": f"call_{t}",
            "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"cmd": f"pytest -k case{t}"})},
        }
        log = "\n".join(f"case{t} line {i}: {'abcdefgh'[i % 8] * (i % 13 + 3)}" for i in range(40))
        msgs += [
            {"role": "user", "content": f"step {t}: run the tests"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": log},
            {"role": "assistant", "content": f"Step {t} done."},
        ]
    msgs.append({"role": "user", "content": "What failed?"})
    return msgs


def post_chat(url: str, msgs: list[dict[str, Any]], **headers: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": msgs}, headers=headers
    )


@pytest.mark.parametrize("depth", [1000, 1023, 5000])
def test_old_tool_call_arguments_nested_1000_deep_are_dropped_not_a_500(
    start_proxy: ProxyFactory, upstream: FakeUpstream, depth: int
) -> None:
    """Issue 20: orjson reads arguments up to 1,024 levels deep; the facts of the dropped span
    walked them recursively, overflowed the stack, and the request failed with a 500. (Past
    orjson's limit the arguments are read as text; so is a tool result's JSON past 100.)"""
    url = start_proxy(context_window=2048)
    msgs = session()
    msgs[2]["tool_calls"][0]["function"]["arguments"] = nested_object(depth)
    msgs[3]["content"] = nested_object(depth)
    r = post_chat(url, msgs)
    assert r.status_code == 200, r.text[:300]
    assert "trim:" in r.headers["x-shrink-actions"]
    sent = upstream.last.json()["messages"]
    assert len(sent) < len(msgs) and sent[-1] == msgs[-1]
    assert msgs[2] not in sent


def test_json_tool_results_with_lone_surrogate_escapes_are_compacted_and_sent(
    start_proxy: ProxyFactory, upstream: FakeUpstream
) -> None:
    r"""A tool result holding the JSON text `"\ud800"` (six characters in the request: the
    body itself is valid UTF-8 JSON). Python's json reads the escape into a lone surrogate; once
    stage 1 (the newest result) or the facts (a dropped one) wrote it back raw, orjson could not
    re-serialise the request: a 500."""
    url = start_proxy(context_window=2048, facts_window_share=4)  # room for facts
    pods = [{"name": f"pod-{i}", "status": "Running", "note": "\\ud800 half"} for i in range(200)]
    pods[7] = {"name": "pod-7", "status": "failed", "note": "\\udc00 other half"}
    text = json.dumps(pods).replace("\\\\u", "\\u")  # the text holds the escapes themselves
    assert "\\ud800" in text and "\ud800" not in text
    msgs = session()
    # An old result, short enough to be left alone by stage 1: dropped, its failed pod is a fact.
    msgs[3]["content"] = json.dumps(pods[5:9]).replace("\\\\u", "\\u")
    msgs[-1:-1] = [
        {"role": "assistant", "content": None, "tool_calls": [{**msgs[2]["tool_calls"][0]}]},
        {"role": "tool", "tool_call_id": "call_0", "content": text},  # compacted by stage 1
    ]
    r = post_chat(url, msgs)
    assert r.status_code == 200, r.text[:300]
    actions = r.headers["x-shrink-actions"]
    assert "tools:" in actions and "trim:" in actions and "facts:" in actions, actions
    sent = upstream.last.json()["messages"]
    facts = next(m["content"] for m in sent if "omitted" in str(m.get("content")))
    assert '"status": "failed", "name": "pod-7"' in facts
    assert "\\udc00 other half" in facts  # the escape itself, as the client sent it
    compacted = sent[-2]["content"]
    assert compacted != text and "\\ud800 half" in compacted
    json.loads(compacted)  # still JSON, with the same escapes


def with_deep(body: dict[str, Any], depth: int) -> bytes:
    """`body` as JSON with each "DEEP" string replaced by `depth` nested empty arrays (too deep
    for json.dumps and orjson.dumps to write themselves)."""
    return json.dumps(body).replace('"DEEP"', "[" * depth + "]" * depth).encode()


@pytest.mark.parametrize(
    ("field", "depth"),
    [("messages", 255), ("messages", 256), ("tools", 300), ("tools", 800)],
)
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/shrink"])
def test_a_shrunk_request_nested_past_orjson_s_limit_is_still_sent(
    start_proxy: ProxyFactory, upstream: FakeUpstream, field: str, depth: int, route: str
) -> None:
    """orjson writes at most 254 levels; the wire accepts 256 in `messages` (counted from the
    list: here the latest user message holds the rest) and reads any other field up to 1,024.
    Re-serialised once shrunk, such a body made orjson raise: a 500."""
    url = start_proxy(context_window=2048)
    msgs = session()
    body: dict[str, Any] = {"model": "gpt-4o", "messages": msgs}
    if field == "messages":
        msgs[-1]["x_extra"] = "DEEP"  # the latest user message: kept
        depth -= 2  # the messages list and the message
    else:
        body["tools"] = [{"type": "function", "function": {"name": "f", "x_extra": "DEEP"}}]
    raw = with_deep(body, depth)
    r = httpx.post(url + route, content=raw)
    assert r.status_code == 200, r.text[:300]
    assert "trim:" in r.headers["x-shrink-actions"]
    sent, got = (
        orjson.loads(raw),
        orjson.loads(r.content if route == "/v1/shrink" else upstream.last.body),
    )
    assert got["messages"][-1] == sent["messages"][-1] and len(got["messages"]) < len(msgs)
    if route != "/v1/shrink":
        # The client's tools as sent (the proxy's retrieval tool, when the messages name a ref,
        # after them: proxy.retrieval).
        assert got.get("tools", [])[: len(sent.get("tools", []))] == sent.get("tools", [])


def test_a_shrunk_request_too_deep_for_any_encoder_is_a_clear_400(
    start_proxy: ProxyFactory, upstream: FakeUpstream
) -> None:
    """Tools nested 1,020 levels (orjson reads 1,024): sent as they came while nothing needs
    cutting, refused with a 400 saying why when the shrunk request cannot be written."""
    url = start_proxy(context_window=2048)
    tools = [{"type": "function", "function": {"name": "f", "x_extra": "DEEP"}}]
    small = [{"role": "user", "content": "hi"}]
    for msgs, status in ((small, 200), (session(), 400)):
        raw = with_deep({"model": "gpt-4o", "messages": msgs, "tools": tools}, 1020)
        upstream.reset()
        r = httpx.post(url + "/v1/chat/completions", content=raw)
        assert r.status_code == status, r.text[:300]
        if status == 200:
            assert upstream.last.body == raw
        else:
            assert r.json()["error"]["type"] == "invalid_request_error"
            assert "nested" in r.json()["error"]["message"] and upstream.requests == []


# --- a pipeline that raises ------------------------------------------------------------------


def fail(exc: BaseException) -> Any:
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return raising


SECRET = "hunter2-secret-content"


def big_session() -> list[dict[str, Any]]:
    """session() with one long tool result (stage 1's work), its text quoted in no log."""
    msgs = session()
    msgs[-3]["content"] = "\n".join(f"{SECRET} row {i}: {'xyz' * (i % 9 + 1)}" for i in range(900))
    return msgs


def metric(url: str, fallback: str) -> float:
    text = httpx.get(url + "/metrics").text
    line = f'shrink_pipeline_errors_total{{fallback="{fallback}"}} '
    return float(next(x for x in text.splitlines() if x.startswith(line)).split()[-1])


@pytest.mark.parametrize(
    ("target", "exc"),
    [
        ("proxy.pipeline.compact_text", RuntimeError(f"stage 1 bug near {SECRET}")),
        ("proxy.pipeline.notes.message_facts", RecursionError("maximum recursion depth exceeded")),
        ("proxy.pipeline.compact.parse", MemoryError()),
    ],
    ids=["stage1", "facts", "memory"],
)
@pytest.mark.parametrize("size", ["inline", "thread"])
def test_a_pipeline_error_falls_back_to_trimming_and_is_logged_and_counted(
    start_proxy: ProxyFactory,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    target: str,
    exc: BaseException,
    size: str,
) -> None:
    """The request is answered, shrunk by stage 2's cut and plain head+tail cuts alone: no 500.
    Inline and in a worker thread (a body over shrinker.THREAD_THRESHOLD)."""
    url = start_proxy(context_window=2048)
    monkeypatch.setattr(target, fail(exc))
    msgs = big_session()
    if size == "thread":
        msgs[1]["content"] = "x" * 40_000  # an old message: the body is over 32 KB
    with caplog.at_level("ERROR", logger="proxy.shrinker"):
        r = post_chat(url, msgs, **{"x-request-id": "req-fallback-1"})
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-shrink-actions"].endswith("fallback:1")
    assert "trim:" in r.headers["x-shrink-actions"]
    assert "tools:" not in r.headers["x-shrink-actions"]  # stage 1 was not run again
    assert int(r.headers["x-shrink-tokens-after"]) <= int(r.headers["x-shrink-budget"])
    sent = upstream.last.json()["messages"]
    assert sent[0] == msgs[0] and sent[-1] == msgs[-1] and len(sent) < len(msgs)
    [record] = [r for r in caplog.records if r.name == "proxy.shrinker"]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["request_id"] == "req-fallback-1"
    assert fields["error"] == type(exc).__name__ and fields["fallback"] == "trim"
    assert SECRET not in caplog.text
    assert metric(url, "trim") == 1 and metric(url, "unchanged") == 0


@pytest.mark.parametrize(
    ("target", "mode"),
    [("proxy.pipeline.trim_history", "trim"), ("proxy.pipeline.compact_text", "tools")],
    ids=["the_fallback_fails_too", "a_mode_that_does_not_trim"],
)
def test_the_request_is_sent_unchanged_when_no_fallback_can_shrink_it(
    start_proxy: ProxyFactory,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    mode: str,
) -> None:
    url = start_proxy(context_window=2048)
    monkeypatch.setattr(target, fail(KeyError(SECRET)))
    raw = orjson.dumps({"model": "gpt-4o", "messages": big_session()})
    r = httpx.post(url + "/v1/chat/completions", content=raw, headers={"x-shrink-mode": mode})
    assert r.status_code == 200, r.text[:300]
    assert upstream.last.body == raw  # the client's bytes, untouched
    assert r.headers["x-shrink-actions"] == "fallback:1"
    assert metric(url, "unchanged") == 1


def test_the_preview_route_falls_back_too(
    start_proxy: ProxyFactory, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = start_proxy(context_window=2048)
    monkeypatch.setattr("proxy.pipeline.compact_text", fail(ValueError(SECRET)))
    r = httpx.post(url + "/v1/shrink", json={"model": "gpt-4o", "messages": big_session()})
    assert r.status_code == 200, r.text[:300]
    report = r.json()["report"]
    assert report["actions"]["fallback"] == 1 and report["fits"]
    [note] = [n for n in report["notes"] if n.startswith("pipeline error")]
    assert "ValueError at proxy/pipeline/__init__.py:" in note and SECRET not in note
    assert upstream.requests == []


# --- an error that reaches the generic handler --------------------------------------------------


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length from `sock`: status, headers, body. Raises
    ConnectionError when the connection ends (EOF or reset) before the response is complete."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"EOF after {len(data)} bytes of the head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"EOF after {len(body)} of {length} body bytes")
        body += chunk
    return int(status_line.split()[1]), headers, body


def request(path: str, body: bytes = b"") -> bytes:
    method = "POST" if body else "GET"
    return (
        f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_an_unexpected_error_closes_the_keep_alive_connection_cleanly(
    start_proxy: ProxyFactory, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug outside the pipeline (here: a wire helper that raises) still gets an OpenAI-shaped
    500, and says `connection: close`: uvicorn closes the connection after an exception even
    once the answer is sent, and a keep-alive client that was not told met a reset or an EOF
    on its next request on that connection."""
    url = start_proxy()
    monkeypatch.setattr("proxy.wire.is_stream", fail(RuntimeError(SECRET)))
    host, port = url.removeprefix("http://").split(":")
    chat = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request("/v1/chat/completions", chat))
        status, headers, body = read_response(sock)
        assert status == 500
        error = orjson.loads(body)["error"]
        assert error["type"] == "api_error" and SECRET not in body.decode()
        assert headers.get("connection") == "close"
        # A client that reuses the connection anyway finds it closed, never half-answered.
        try:
            sock.sendall(request("/healthz"))
            assert sock.recv(65536) == b""
        except ConnectionResetError:
            pass
    with socket.create_connection((host, int(port)), timeout=5) as sock:  # the proxy is fine
        sock.sendall(request("/healthz"))
        assert read_response(sock)[0] == 200
