"""Big requests are parsed and planned in a planner process (proxy.planner), bounded in number.

Over real HTTP: the proxy under uvicorn in front of the recording fake upstream, with the
process threshold lowered so that test bodies of a few MB go to the planner process.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson

from proxy.planner import guess_model
from tests.conftest import ProxyFactory
from tests.fakes.upstream import FakeUpstream

BIG = 300_000  # bytes: lowered threshold for these tests


def session(turns: int, lines: int = 400) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        log = "\n".join(f"case{t} line {i}: test_{i} PASSED" for i in range(lines))
        msgs += [
            {"role": "user", "content": f"step {t}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": log + "\nERROR: boom"},
        ]
    msgs.append({"role": "user", "content": "What failed?"})
    return msgs


def plans(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    out = {}
    for line in text.splitlines():
        if line.startswith("shrink_plans_total{"):
            where = line.split('where="')[1].split('"')[0]
            out[where] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_big_body_is_planned_in_a_process_and_sent_shrunk(
    start_proxy: ProxyFactory, upstream: FakeUpstream
) -> None:
    url = start_proxy(context_window=8192, process_min_bytes=BIG)
    body = {"messages": session(40), "model": "qwen2.5-coder", "temperature": 0.2}
    raw = orjson.dumps(body)
    assert len(raw) > BIG
    r = httpx.post(url + "/v1/chat/completions", content=raw, timeout=120)
    assert r.status_code == 200, r.text
    sent = upstream.last.json()
    assert list(sent) == ["messages", "model", "temperature"]  # every field, in its order
    assert sent["messages"][-1] == body["messages"][-1]
    assert len(upstream.last.body) < len(raw)
    assert "trim" in r.headers["x-shrink-actions"]
    assert plans(url)["process"] == 1


def test_a_big_body_that_fits_goes_out_byte_for_byte(
    start_proxy: ProxyFactory, upstream: FakeUpstream
) -> None:
    url = start_proxy(context_window=1_000_000, tool_max_tokens=100_000, process_min_bytes=BIG)
    raw = orjson.dumps({"model": "qwen2.5-coder", "messages": session(30, lines=300)})
    assert len(raw) > BIG
    r = httpx.post(url + "/v1/chat/completions", content=raw, timeout=120)
    assert r.status_code == 200, r.text
    assert upstream.last.body == raw
    assert plans(url)["process"] == 1


def test_a_big_body_the_wire_refuses_is_a_400_in_openais_shape(start_proxy: ProxyFactory) -> None:
    url = start_proxy(process_min_bytes=BIG)
    raw = orjson.dumps({"model": "m", "messages": "x" * BIG})
    r = httpx.post(url + "/v1/chat/completions", content=raw, timeout=120)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["param"] == "messages"


def test_the_preview_of_a_big_body_shows_its_messages(start_proxy: ProxyFactory) -> None:
    url = start_proxy(context_window=1_000_000, tool_max_tokens=100_000, process_min_bytes=BIG)
    body = {"model": "qwen2.5-coder", "messages": session(30, lines=300)}
    r = httpx.post(url + "/v1/shrink", json=body, timeout=120)
    assert r.status_code == 200
    assert r.json()["messages"] == body["messages"]


def test_small_requests_go_on_while_a_big_one_is_planned(
    start_proxy: ProxyFactory, upstream: FakeUpstream
) -> None:
    """Head of line: a big cold body is parsed and planned in the planner process; the small
    requests sent meanwhile are answered before it is."""
    url = start_proxy(context_window=8192, process_min_bytes=BIG)
    raw = orjson.dumps({"model": "qwen2.5-coder", "messages": session(400, lines=300)})
    small = {"model": "qwen2.5-coder", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(url + "/v1/chat/completions", json=small)  # warm: loaded, connected
    big_done: list[float] = []

    def big() -> None:
        httpx.post(url + "/v1/chat/completions", content=raw, timeout=300)
        big_done.append(time.perf_counter())

    thread = threading.Thread(target=big)
    thread.start()
    answered = []
    with httpx.Client(base_url=url, timeout=30) as client:
        while thread.is_alive() and len(answered) < 200:
            t = time.perf_counter()
            assert client.post("/v1/chat/completions", json=small).status_code == 200
            answered.append(time.perf_counter() - t)
            time.sleep(0.02)
    thread.join(300)
    assert big_done
    assert len(answered) >= 5, "the big request was planned before any small one went through"
    assert plans(url)["process"] == 1


def test_past_the_queue_bound_a_request_gets_503_with_retry_after(
    start_proxy: ProxyFactory,
) -> None:
    raw = orjson.dumps({"model": "qwen2.5-coder", "messages": session(300, lines=300)})
    url = start_proxy(
        context_window=8192, process_min_bytes=BIG, max_queued_bytes=len(raw) + len(raw) // 2
    )
    statuses: list[httpx.Response] = []

    def send() -> None:
        statuses.append(httpx.post(url + "/v1/chat/completions", content=raw, timeout=300))

    threads = [threading.Thread(target=send) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(300)
    codes = sorted(r.status_code for r in statuses)
    assert codes[0] == 200 and 503 in codes
    refused = next(r for r in statuses if r.status_code == 503)
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "overloaded"
    assert plans(url)["overloaded"] >= 1


def test_the_model_is_read_off_a_body_without_parsing_it() -> None:
    assert guess_model(b'{"messages": [], "model": "gpt-4o"}') == "gpt-4o"
    assert guess_model(b'{"model":"a\\u00e9b","messages":[]}') == "a\u00e9b"
    quoted = b'{"messages": [{"role": "user", "content": "\\"model\\": \\"x\\""}], "model": "y"}'
    assert guess_model(quoted) == "y"
    assert guess_model(b'{"messages": []}') is None
    padding = b'{"messages": [{"role": "user", "content": "' + b"a" * 200_000 + b'"}], '
    assert guess_model(padding + b'"model": "tail-model"}') == "tail-model"


def test_a_hostile_tool_result_stalls_nobody(start_proxy: ProxyFactory) -> None:
    """Issue 20: a source file whose column-0 lines are `a*a*a*...a` took the outline pattern
    seconds per line (doubling with each `*a`), inline on the event loop: every other client
    waited. Now it is read in milliseconds, and small requests sent meanwhile are answered."""
    url = start_proxy(context_window=8192)
    line = "*".join(["a"] * 26)  # 51 characters: about a minute per line for the old pattern
    blocks = [f"def f{i}():\n    x = {i}\n    y = {i}\n    return {i}\n{line}" for i in range(40)]
    hostile = "\n".join(blocks)
    body = {
        "model": "qwen2.5-coder",
        "messages": [
            {"role": "user", "content": "read it"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": hostile},
            {"role": "user", "content": "and?"},
        ],
    }
    small = {"model": "qwen2.5-coder", "messages": [{"role": "user", "content": "hi"}]}
    done: list[int] = []
    thread = threading.Thread(
        target=lambda: done.append(
            httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code
        )
    )
    thread.start()
    slowest = 0.0
    with httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(10):
            t = time.perf_counter()
            assert client.post("/v1/chat/completions", json=small).status_code == 200
            slowest = max(slowest, time.perf_counter() - t)
    thread.join(60)
    assert done == [200]
    assert slowest < 5, f"a small request waited {slowest:.1f} s"
