"""Shrinking over real HTTP: what reaches the upstream, x-shrink-* headers, the preview route."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
import orjson
import pytest

from proxy.pipeline.refs import text_ref
from tests.conftest import CORPUS

BIG_LOG = "\n".join(
    [f"Collecting package-{i}==1.{i}.0" for i in range(400)]
    + ["ERROR: No matching distribution found for requests==2.99.0", "[exit code: 1]"]
)


def varied_log(seed: int, lines: int = 60) -> str:
    """Non-repetitive output, so compaction cannot collapse it to nothing."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
    out = []
    for i in range(lines):
        w = [words[(seed * 7 + i * j) % len(words)] for j in range(1, 9)]
        out.append(f"{seed}:{i} " + " ".join(w) + f" {seed * 1000 + i * 37}")
    return "\n".join(out)


def conversation(turns: int, tool_text: str | None = None) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"step {t}: install things"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{t}",
                        "type": "function",
                        "function": {"name": "run", "arguments": json.dumps({"cmd": f"pip {t}"})},
                    }
                ],
            }
        )
        text = tool_text if tool_text is not None else varied_log(t)
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text})
        msgs.append({"role": "assistant", "content": f"Done with step {t}."})
    msgs.append({"role": "user", "content": "What failed in the last step?"})
    return msgs


def test_small_request_passes_byte_identical_with_headers(proxy_url, upstream):
    raw = b'{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"extra":1}'
    r = httpx.post(proxy_url + "/v1/chat/completions", content=raw)
    assert r.status_code == 200
    assert upstream.last.body == raw
    assert r.headers["x-shrink-actions"] == "none"
    assert int(r.headers["x-shrink-tokens-before"]) == int(r.headers["x-shrink-tokens-after"]) > 0


def test_oversized_tool_result_is_compacted_and_fields_kept(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256)
    body = {
        "model": "fake-model",
        "messages": conversation(1, BIG_LOG),
        "temperature": 0.3,
        "x_vendor": {"a": 1},
    }
    r = httpx.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 200
    sent = upstream.last.json()
    assert sent["temperature"] == 0.3 and sent["x_vendor"] == {"a": 1}
    tool = sent["messages"][3]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_0"
    assert "omitted by shrink-proxy" in tool["content"]
    assert "ERROR: No matching distribution found for requests==2.99.0" in tool["content"]
    *shown, ref = tool["content"].rstrip().splitlines()
    assert shown[-1] == "[exit code: 1]" and "Retrieve more: hash=" in ref
    assert r.headers["x-shrink-actions"] == "tools:1"
    before, after = (
        int(r.headers["x-shrink-tokens-before"]),
        int(r.headers["x-shrink-tokens-after"]),
    )
    assert after < before
    assert len(upstream.last.body) < len(orjson.dumps(body))


def test_history_is_trimmed_to_fit_and_latest_user_kept(start_proxy, upstream):
    url = start_proxy(context_window=4096, tool_max_tokens=256, completion_reserve=512)
    msgs = conversation(20)
    r = httpx.post(url + "/v1/chat/completions", json={"model": "fake-model", "messages": msgs})
    assert r.status_code == 200, r.text
    sent = upstream.last.json()["messages"]
    assert sent[0] == msgs[0]
    assert sent[-1] == msgs[-1]
    assert "trim:" in r.headers["x-shrink-actions"]
    assert int(r.headers["x-shrink-tokens-after"]) <= int(r.headers["x-shrink-budget"])
    assert any("earlier messages" in (m.get("content") or "") for m in sent)
    # Every kept tool result still follows its call.
    calls = {tc["id"] for m in sent for tc in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in calls for m in sent if m["role"] == "tool")


def test_same_conversation_next_turn_keeps_the_prefix(start_proxy, upstream):
    """Turn k+1 of an agent loop must start with exactly what turn k sent (prefix caches)."""
    url = start_proxy(context_window=4096, tool_max_tokens=256, completion_reserve=512)
    msgs = conversation(20)
    httpx.post(url + "/v1/chat/completions", json={"model": "fake-model", "messages": msgs})
    first = upstream.last.json()["messages"]
    nxt = msgs + [{"role": "assistant", "content": "The install of requests==2.99.0 failed."}]
    nxt.append({"role": "user", "content": "ok"})
    httpx.post(url + "/v1/chat/completions", json={"model": "fake-model", "messages": nxt})
    second = upstream.last.json()["messages"]
    assert second[: len(first)] == first


@pytest.mark.parametrize(("mode", "expect"), [("off", "none"), ("tools", "tools:")])
def test_mode_header_opts_out(start_proxy, upstream, mode, expect):
    url = start_proxy(context_window=4096, tool_max_tokens=256)
    raw = orjson.dumps({"model": "fake-model", "messages": conversation(20)})
    r = httpx.post(url + "/v1/chat/completions", content=raw, headers={"x-shrink-mode": mode})
    assert r.status_code == 200
    assert r.headers["x-shrink-actions"].startswith(expect)
    assert "trim" not in r.headers["x-shrink-actions"]
    if mode == "off":
        assert upstream.last.body == raw


def test_bad_mode_header_is_400(proxy_url, upstream):
    r = httpx.post(
        proxy_url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"x-shrink-mode": "maybe"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-shrink-mode"
    assert upstream.requests == []


def test_latest_message_too_large_is_context_length_exceeded(start_proxy, upstream):
    url = start_proxy(context_window=1024, min_prompt_budget=256, cut_latest_user=False)
    huge = " ".join(f"word{i}" for i in range(5000))
    r = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "fake-model", "messages": [{"role": "user", "content": huge}]},
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded"
    budget = int(r.headers["x-shrink-budget"])
    assert f"prompt budget of {budget:,} tokens (its window of 1,024 minus" in err["message"]
    assert int(r.headers["x-shrink-tokens-after"]) > int(r.headers["x-shrink-budget"])
    assert upstream.requests == []


def test_a_latest_user_message_too_large_alone_is_cut_in_the_middle_and_flagged(
    start_proxy, upstream
):
    """`cat big.log | llm "summarise"`: the one message is larger than the whole window. Its
    middle is cut (the marker tells the model), the client is told in `x-shrink-warning`, and
    the preview says the same."""
    url = start_proxy(context_window=4096)
    log = "".join(
        f"2026-12-01T10:{i // 60 % 60:02d}:{i % 60:02d} worker {i % 7} ok job={i}\n"
        for i in range(6000)
    )
    prompt = log + "summarise this log"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="fake-model", messages=messages
        )
        assert raw.parse().choices[0].message.content
    # (The fake's usage says it saw far fewer tokens: `upstream-truncated` may come too.)
    assert "latest-user-cut" in raw.headers["x-shrink-warning"].split(", ")
    assert "user_cut:1" in raw.headers["x-shrink-actions"]
    assert int(raw.headers["x-shrink-tokens-after"]) <= int(raw.headers["x-shrink-budget"])
    sent = orjson.loads(upstream.last.body)["messages"]
    assert sent[0] == messages[0]
    cut = sent[-1]["content"]
    assert cut.startswith(log[:200]) and cut.endswith(log[-200:] + "summarise this log")
    assert "lines" in cut and len(cut) < len(prompt) // 3
    # The marker names the whole message, which the proxy keeps: the client (or the model, with
    # tools) reads it back.
    ref = text_ref(prompt)
    assert f"omitted by shrink-proxy. Retrieve more: hash={ref} ...]" in cut
    found = httpx.get(f"{url}/v1/retrieve/{ref}", params={"search": "job=3000"}).json()
    assert found["matches"] == 1 and found["text"] == f"3001: {log.splitlines()[3000]}"
    preview = httpx.post(url + "/v1/shrink", json={"model": "fake-model", "messages": messages})
    assert preview.headers["x-shrink-warning"] == "latest-user-cut"
    assert preview.json()["messages"] == sent


def test_sdk_sees_shrink_headers_on_streams(start_proxy, upstream):
    url = start_proxy(context_window=4096, tool_max_tokens=256)
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="fake-model", messages=conversation(20), stream=True
        )
        assert "trim:" in raw.headers["x-shrink-actions"]
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == "tok0 tok1 tok2 "


def test_cold_large_stream_is_shrunk_in_a_thread_as_it_would_be_inline(start_proxy, upstream):
    """A large request never seen before is parsed again and planned in a worker thread (the
    handler lets go of its parsed body while it waits); what reaches the upstream is what the
    same request, seen before and planned inline, sends."""
    url = start_proxy(context_window=4096, tool_max_tokens=256)
    text = varied_log(7, lines=1500)  # ~100 KB of new text: over the thread threshold
    msgs = conversation(1, text)
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
        sent = []
        for _ in range(2):  # cold, then warm
            stream = client.chat.completions.create(
                model="fake-model", messages=msgs, stream=True, temperature=0.25
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            sent.append(upstream.last.body)
    assert sent[0] == sent[1]
    body = orjson.loads(sent[0])
    assert body["temperature"] == 0.25
    assert body["stream_options"] == {"include_usage": True}  # injected after the thread's parse
    assert "omitted by shrink-proxy" in body["messages"][3]["content"]
    assert body["messages"][-1] == msgs[-1]


def test_shrink_preview_does_not_call_upstream(start_proxy, upstream):
    url = start_proxy(context_window=4096, tool_max_tokens=256)
    msgs = conversation(20)
    r = httpx.post(url + "/v1/shrink", json={"model": "fake-model", "messages": msgs})
    assert r.status_code == 200
    out = r.json()
    assert out["messages"][-1] == msgs[-1]
    rep = out["report"]
    assert rep["tokens_after"] < rep["tokens_before"]
    assert rep["actions"]["tools"] == 20 and rep["actions"]["trim"] > 0
    assert {d["stage"] for d in rep["details"]} == {"tools", "trim"}
    assert upstream.requests == []


def test_cli_shrink_on_a_corpus_file(tmp_path):
    src = sorted(CORPUS.glob("*.json"))
    if not src:
        pytest.skip(f"corpus not found at {CORPUS}")
    doc = orjson.loads(src[-1].read_bytes())
    req = tmp_path / "req.json"
    req.write_bytes(
        orjson.dumps({"model": "qwen", "messages": doc["messages"], "tools": doc["tools"]})
    )
    r = subprocess.run(
        [sys.executable, "-m", "proxy", "shrink", str(req), "--context-window", "8192"],
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = orjson.loads(r.stdout)
    assert out["messages"][-1] == doc["messages"][-1]
    assert out["tools"] == doc["tools"]
    assert b"fits: yes" in r.stderr and b"actions: tools:" in r.stderr
