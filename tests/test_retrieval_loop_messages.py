"""The in-flight retrieval loop on the Anthropic Messages API over real HTTP: the real
`anthropic` SDK as the client, the proxy and a scripted upstream that calls `shrink_retrieve`
for the hash its markers name (tests/fakes/retriever_messages.py), each under uvicorn on
127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.pipeline.refs import refs_in, text_ref
from proxy.retrieval.rounds import NOT_RUN
from proxy.retrieval.tool import MESSAGES_TOOL, NAME
from tests.fakes.anthropic import SIGNATURE
from tests.fakes.retriever import proxies, running
from tests.fakes.retriever_messages import OUTPUT_TOKENS, REDACTED, FakeMessagesRetriever
from tests.test_shrink_http import BIG_LOG

MODEL = "claude-fake-1"
TOOLS: list[dict[str, Any]] = [
    {"name": "run", "description": "run a command", "input_schema": {"type": "object"}}
]
REF = text_ref(BIG_LOG)
FIRST_LINE = BIG_LOG.splitlines()[0]


def conversation() -> list[dict[str, Any]]:
    """An agent's turn whose tool result (BIG_LOG) the proxy compacts, naming REF."""
    return [
        {"role": "user", "content": "step 0: install things"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_0", "name": "run", "input": {"cmd": "pip"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": BIG_LOG}],
        },
        {"role": "assistant", "content": "Done with step 0."},
        {"role": "user", "content": "What failed in the last step?"},
    ]


@pytest.fixture(scope="module")
def script_server() -> Iterator[FakeMessagesRetriever]:
    with running(FakeMessagesRetriever()) as fake:
        yield fake


@pytest.fixture
def script(script_server: FakeMessagesRetriever) -> FakeMessagesRetriever:
    script_server.reset()
    return script_server


@pytest.fixture
def proxy(script: FakeMessagesRetriever) -> Iterator[Any]:
    """proxy(**settings) -> an Anthropic client of a proxy in front of the scripted upstream."""
    with proxies(
        script.url,
        lambda url: anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=30),
    ) as start:
        yield start


def request(**more: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "system": "You are a coding agent.",
        "messages": conversation(),
        "tools": more.pop("tools", TOOLS),
        **more,
    }


def create(client: anthropic.Anthropic, headers: dict[str, str] | None = None, **more: Any):
    """The raw response (headers) of a request whose compacted tool result names REF."""
    return client.messages.with_raw_response.create(**request(**more), extra_headers=headers or {})


def sent(script: FakeMessagesRetriever, i: int) -> dict[str, Any]:
    return script.requests[i].json()


def texts(content: list[Any]) -> str:
    return "".join(b.text for b in content if b.type == "text")


def test_non_stream_serves_the_call_and_the_client_sees_one_message(proxy, script):
    raw = create(proxy(), headers={"x-script-cached": "3"})
    out = raw.parse()
    assert len(script.requests) == 2 and raw.headers["x-shrink-retrieve-rounds"] == "1"
    first, second = sent(script, 0), sent(script, 1)
    assert first["tools"] == [*TOOLS, MESSAGES_TOOL]  # ours after the client's, as defined
    assert REF in refs_in(str(first["messages"]))
    # The continuation: the same body, the round's assistant message and one user message
    # with a tool_result per call (a page of the original).
    assert {k: v for k, v in second.items() if k != "messages"} == {
        k: v for k, v in first.items() if k != "messages"
    }
    assert second["messages"][: len(first["messages"])] == first["messages"]
    said, results = second["messages"][len(first["messages"]) :]
    assert said == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking. "},
            {"type": "tool_use", "id": "toolu_0_1", "name": NAME, "input": {"hash": REF}},
        ],
    }
    (result,) = results["content"]
    assert results["role"] == "user" and result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_0_1"
    assert result["content"].startswith(f"[shrink_retrieve hash={REF}: lines 1-")
    assert FIRST_LINE in result["content"]
    # One message: the first round's id, every round's text, no call of ours, usage summed.
    assert out.id == "msg_round0" and out.stop_reason == "end_turn"
    assert [b.type for b in out.content] == ["text", "text"]
    assert texts(out.content).startswith("Looking. I read: [shrink_retrieve hash=")
    assert texts(out.content).endswith(FIRST_LINE)
    inputs = [len(r.body) // 4 for r in script.requests]
    assert out.usage.input_tokens == sum(inputs)
    assert out.usage.output_tokens == 2 * OUTPUT_TOKENS
    assert out.usage.cache_read_input_tokens == 6
    assert out.usage.cache_creation_input_tokens == 2
    assert f'"name":"{NAME}"' not in raw.http_response.text


def test_thinking_goes_back_byte_for_byte_and_reaches_the_client(proxy, script):
    out = create(proxy(), headers={"x-script-thinking": "1"}).parse()
    said = sent(script, 1)["messages"][-2]["content"]
    assert said[:2] == [
        {"type": "thinking", "thinking": "The user wants a short answer; I will give one. (0)",
         "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
    ]  # fmt: skip
    assert [b.type for b in out.content] == ["thinking", "redacted_thinking", "text", "text"]
    assert out.content[0].signature == SIGNATURE and out.content[1].data == REDACTED


def test_beside_client_tools_the_client_gets_only_its_own_call(proxy, script):
    raw = create(proxy(), headers={"x-script-both": "1"})
    out = raw.parse()
    # Round one called both; the continuation echoed the round whole (as the API wants it with
    # thinking) and answered the client's call NOT_RUN beside the retrieval's page.
    assert len(script.requests) == 2
    said, results = sent(script, 1)["messages"][-2:]
    assert [b.get("name") for b in said["content"] if b["type"] == "tool_use"] == ["run", NAME]
    assert [b["tool_use_id"] for b in results["content"]] == ["toolu_0_0", "toolu_0_1"]
    assert results["content"][0]["content"] == NOT_RUN
    assert results["content"][1]["content"].startswith(f"[shrink_retrieve hash={REF}")
    # The client: round one's text, then the call it can answer (made again), nothing of ours.
    uses = [b for b in out.content if b.type == "tool_use"]
    assert [(u.name, u.input, u.id) for u in uses] == [("run", {"cmd": "ls"}, "toolu_1_0")]
    assert out.stop_reason == "tool_use" and texts(out.content) == "Looking. "


def test_a_hash_never_issued_is_refused_to_the_model(proxy, script):
    out = create(proxy(), headers={"x-script-hash": "ab" * 12}).parse()
    refusal = sent(script, 1)["messages"][-1]["content"][0]["content"]
    assert "was not issued in this conversation" in refusal
    assert texts(out.content) == f"Looking. I read: {refusal}"


def test_malformed_input_is_answered_with_the_reason(proxy, script):
    out = create(proxy(), headers={"x-script-bad-input": "1"}).parse()
    refusal = sent(script, 1)["messages"][-1]["content"][0]["content"]
    assert refusal == 'shrink_retrieve: the arguments must be an object such as {"hash": "..."}.'
    assert texts(out.content).endswith(refusal)


def test_an_expired_hash_says_so(proxy, script):
    out = create(proxy(store_ttl=0.01), headers={"x-script-delay": "0.1"}).parse()
    refusal = sent(script, 1)["messages"][-1]["content"][0]["content"]
    assert refusal.startswith(f"shrink_retrieve: hash={REF} is no longer kept: expired")
    assert texts(out.content).endswith(refusal)


def test_the_round_limit_strips_our_calls(proxy, script):
    raw = create(proxy(retrieve_rounds=2), headers={"x-script-always": "1"})
    assert raw.headers["x-shrink-retrieve-limit"] == "reached"
    assert raw.headers["x-shrink-retrieve-rounds"] == "2"
    out = raw.parse()
    assert len(script.requests) == 3 and out.stop_reason == "end_turn"
    assert [b.type for b in out.content] == ["text"] * 3
    assert texts(out.content) == "Looking. " * 3
    assert out.usage.output_tokens == 3 * OUTPUT_TOKENS


def test_header_off_sends_no_tool_and_serves_no_round(proxy, script):
    raw = create(proxy(), headers={"x-shrink-retrieve": "off"})
    assert len(script.requests) == 1 and "x-shrink-retrieve-rounds" not in raw.headers
    assert sent(script, 0)["tools"] == TOOLS
    assert texts(raw.parse().content) == "Plain answer."


def test_setting_off_sends_no_tool(proxy, script):
    raw = create(proxy(retrieve=False))
    assert len(script.requests) == 1 and sent(script, 0)["tools"] == TOOLS
    assert texts(raw.parse().content) == "Plain answer."


def test_without_client_tools_no_tool_is_offered(proxy, script):
    body = request()
    del body["tools"]
    out = proxy().messages.create(**body)
    assert len(script.requests) == 1 and "tools" not in sent(script, 0)
    assert texts(out.content) == "Plain answer."


def test_tool_choice_and_cache_control_stay_as_the_client_sent_them(proxy, script):
    tools = [{**TOOLS[0], "cache_control": {"type": "ephemeral"}}]
    create(proxy(), tools=tools, tool_choice={"type": "tool", "name": "run"})
    first = sent(script, 0)
    assert first["tools"] == [*tools, MESSAGES_TOOL]  # the breakpoint still on the client's
    assert first["tool_choice"] == {"type": "tool", "name": "run"}


def test_a_continuation_error_reaches_the_client_in_anthropic_shape(proxy, script):
    client = proxy()
    with pytest.raises(anthropic.InternalServerError) as info:
        create(client, headers={"x-script-fail-round": "1"})
    assert info.value.status_code == 500
    assert info.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "scripted failure"},
    }


@pytest.mark.parametrize("off", [False, True])
def test_count_tokens_counts_the_request_as_it_would_go(proxy, script, off):
    """With the retrieval tool when the real request would carry it, without it when the
    client turned it off: Claude Code's auto-compact sees what the model will see."""
    client = proxy()
    body = request()
    del body["max_tokens"]
    headers = {"x-shrink-retrieve": "off"} if off else {}
    counted = client.messages.count_tokens(**body, extra_headers=headers)
    (seen,) = script.requests
    tools = seen.json()["tools"]
    assert seen.path == "/v1/messages/count_tokens" and tools[: len(TOOLS)] == TOOLS
    assert [t["name"] for t in tools[len(TOOLS) :]] == ([] if off else [NAME])
    assert counted.input_tokens == len(seen.body) // 4


def test_a_client_that_leaves_a_non_stream_request_stops_the_loop(proxy, script):
    url = str(proxy().base_url).rstrip("/") + "/v1/messages"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json=request(), headers={"x-script-hang-round": "1"}, timeout=1.5)
    assert script.cancelled.wait(10)  # the continuation was dropped once the client left


# --- streams -------------------------------------------------------------------------------


def stream(client: anthropic.Anthropic, headers: dict[str, str] | None = None, **more: Any):
    """(the events as the SDK parsed them, its final message) of a streamed request."""
    with client.messages.stream(**request(**more), extra_headers=headers or {}) as s:
        events = list(s)
        return events, s.get_final_message()


def raw_stream(client: anthropic.Anthropic, headers: dict[str, str] | None = None) -> bytes:
    url = str(client.base_url).rstrip("/") + "/v1/messages"
    r = httpx.post(url, json=request(stream=True), headers=headers or {})
    assert r.status_code == 200
    return r.content


def kinds(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def test_stream_continues_in_the_same_stream_with_usage_summed(proxy, script):
    events, final = stream(proxy(), headers={"x-script-cached": "3"})
    assert len(script.requests) == 2
    assert kinds(events).count("message_start") == 1 and kinds(events)[-1] == "message_stop"
    assert kinds(events).count("message_delta") == 1
    starts = [e for e in events if e.type == "content_block_start"]
    assert [(e.index, e.content_block.type) for e in starts] == [(0, "text"), (1, "text")]
    assert final.id == "msg_round0" and final.stop_reason == "end_turn"
    assert texts(final.content).startswith("Looking. I read: [shrink_retrieve hash=")
    assert texts(final.content).endswith(FIRST_LINE)
    assert not any(b.type == "tool_use" for b in final.content)
    inputs = [len(r.body) // 4 for r in script.requests]
    assert final.usage.input_tokens == sum(inputs)
    assert final.usage.output_tokens == 2 * OUTPUT_TOKENS
    assert final.usage.cache_read_input_tokens == 6
    assert final.usage.cache_creation_input_tokens == 2
    # The continuation as the non-stream loop sends it, rebuilt from the deltas.
    first, second = sent(script, 0), sent(script, 1)
    assert second["messages"][: len(first["messages"])] == first["messages"]
    said, results = second["messages"][len(first["messages"]) :]
    assert said["content"] == [
        {"type": "text", "text": "Looking. "},
        {"type": "tool_use", "id": "toolu_0_1", "name": NAME, "input": {"hash": REF}},
    ]
    assert [b["tool_use_id"] for b in results["content"]] == ["toolu_0_1"]


def test_stream_usage_sums_when_deltas_repeat_the_input_figures(proxy, script):
    _, final = stream(proxy(), headers={"x-script-full-delta": "1", "x-script-cached": "3"})
    inputs = [len(r.body) // 4 for r in script.requests]
    assert final.usage.input_tokens == sum(inputs) and final.usage.cache_read_input_tokens == 6


def test_stream_thinking_is_rebuilt_byte_for_byte_and_reaches_the_client(proxy, script):
    events, final = stream(proxy(), headers={"x-script-thinking": "1"})
    said = sent(script, 1)["messages"][-2]["content"]
    assert said == [
        {"type": "thinking", "thinking": "The user wants a short answer; I will give one. (0)",
         "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "text", "text": "Looking. "},
        {"type": "tool_use", "id": "toolu_0_1", "name": NAME, "input": {"hash": REF}},
    ]  # fmt: skip
    types = [b.type for b in final.content]
    assert types == ["thinking", "redacted_thinking", "text", "text"]
    assert final.content[0].signature == SIGNATURE and final.content[1].data == REDACTED
    indexes = [e.index for e in events if e.type == "content_block_start"]
    assert indexes == [0, 1, 2, 3]


@pytest.mark.parametrize("both", [False, True])
def test_a_stream_without_retrieval_goes_out_byte_for_byte(proxy, script, both):
    """The tool offered, the model answers without it: text alone, or text then the client's
    call with thinking before it (held until the round's end, then given out as it came)."""
    headers = {"x-script-never": "1"}
    if both:
        headers |= {"x-script-both": "1", "x-script-thinking": "1"}
    body = raw_stream(proxy(), headers=headers)
    assert NAME in str(sent(script, 0)["tools"]) and len(script.requests) == 1
    assert body == script.sent
    assert (b'"name":"run"' in body) is both


@pytest.mark.parametrize("thinking", [False, True])
def test_stream_beside_client_tools_the_client_gets_only_its_own_call(proxy, script, thinking):
    headers = {"x-script-both": "1", **({"x-script-thinking": "1"} if thinking else {})}
    events, final = stream(proxy(), headers=headers)
    assert len(script.requests) == 2
    said, results = sent(script, 1)["messages"][-2:]
    assert [b.get("name") for b in said["content"] if b["type"] == "tool_use"] == ["run", NAME]
    assert [b["content"] for b in results["content"]][0] == NOT_RUN
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.name, u.input, u.id) for u in uses] == [("run", {"cmd": "ls"}, "toolu_1_0")]
    assert final.stop_reason == "tool_use" and texts(final.content) == "Looking. "
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == list(range(len(final.content)))


def test_stream_a_hash_never_issued_is_refused_to_the_model(proxy, script):
    _, final = stream(proxy(), headers={"x-script-hash": "ab" * 12})
    refusal = sent(script, 1)["messages"][-1]["content"][0]["content"]
    assert "was not issued in this conversation" in refusal
    assert texts(final.content) == f"Looking. I read: {refusal}"


def test_stream_malformed_input_is_answered_with_the_reason(proxy, script):
    _, final = stream(proxy(), headers={"x-script-bad-input": "1"})
    said, results = sent(script, 1)["messages"][-2:]
    assert said["content"][-1]["input"] == "not an object"  # as the model wrote it
    refusal = results["content"][0]["content"]
    assert refusal == 'shrink_retrieve: the arguments must be an object such as {"hash": "..."}.'
    assert texts(final.content).endswith(refusal)


def test_stream_the_round_limit_strips_our_calls(proxy, script):
    events, final = stream(proxy(retrieve_rounds=2), headers={"x-script-always": "1"})
    assert len(script.requests) == 3 and final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"] * 3
    assert texts(final.content) == "Looking. " * 3
    assert final.usage.output_tokens == 3 * OUTPUT_TOKENS
    assert not any(e.type == "content_block_start" and e.index > 2 for e in events)


def test_stream_a_continuation_error_is_an_anthropic_error_event(proxy, script):
    client = proxy()
    got: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        with client.messages.stream(**request(), extra_headers={"x-script-fail-round": "1"}) as s:
            for text in s.text_stream:
                got.append(text)
    assert got == ["Looking. "]  # the first round's text arrived before the failure
    assert info.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "scripted failure"},
    }
    body = raw_stream(client, headers={"x-script-fail-round": "1"})
    assert body.endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
        b'"message":"scripted failure"}}\n\n'
    )


def test_stream_that_ends_without_its_end_event_gives_what_it_held(proxy, script):
    client = proxy()
    # Round one ends after its blocks: the text goes out, never our call; nothing is served.
    body = raw_stream(client, headers={"x-script-cut-round": "0"})
    assert len(script.requests) == 1
    assert b"Looking. " in body and NAME.encode() not in body
    assert b"message_delta" not in body and b"message_stop" not in body
    # The continuation ends so: the client has both rounds' text and no end event.
    script.reset()
    body = raw_stream(client, headers={"x-script-cut-round": "1"})
    assert len(script.requests) == 2 and b"read: " in body and b"message_stop" not in body


def test_a_client_that_leaves_a_stream_stops_the_loop(proxy, script):
    url = str(proxy().base_url).rstrip("/") + "/v1/messages"
    headers = {"x-script-hang-round": "1"}
    with httpx.stream("POST", url, json=request(stream=True), headers=headers) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                break
    assert script.cancelled.wait(10)  # the continuation was dropped once the client left


def test_first_text_is_not_held_behind_a_round(proxy, script):
    """Round one's text reaches the client while the model is still writing the call."""
    url = str(proxy().base_url).rstrip("/") + "/v1/messages"
    seen = threading.Event()
    started = time.monotonic()
    headers = {"x-script-chunk-delay": "0.3"}
    with httpx.stream("POST", url, json=request(stream=True), headers=headers) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                seen.set()
                break
    assert seen.is_set() and time.monotonic() - started < 2.5  # the whole script takes > 4 s
