"""No request content and no bug in the pipeline ends in an HTTP 500 or a reset connection.

Over real HTTP (the proxy under uvicorn in front of the recording fake upstream): JSON nested
as deep as the parsers allow inside tool-call arguments and tool results, escapes that make no
character, and a pipeline that raises; each request still reaches the upstream, shrunk where it
can be.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
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
