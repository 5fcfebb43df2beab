"""The in-flight retrieval loop on the Responses API (`/v1/responses`) over real HTTP: the real
`openai` SDK as the client, the proxy and a scripted upstream that calls `shrink_retrieve` for
the hash its markers name (tests/fakes/retriever_responses.py), each under uvicorn on
127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from bench.responses_form import to_responses
from proxy.pipeline.refs import refs_in, text_ref
from proxy.retrieval.responses_items import RESPONSES_SHAPE, summed
from proxy.retrieval.rounds import NOT_RUN
from proxy.retrieval.tool import NAME, RESPONSES_TOOL
from tests.fakes.retriever import proxies, running
from tests.fakes.retriever_responses import (
    ENCRYPTED,
    OUTPUT_TOKENS,
    REASONING_TOKENS,
    FakeResponsesRetriever,
)
from tests.test_shrink_http import BIG_LOG, conversation

CHAT_TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
BODY = to_responses(
    {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": CHAT_TOOLS}
)
TOOLS = BODY["tools"]
REF = text_ref(BIG_LOG)
FIRST_LINE = BIG_LOG.splitlines()[0]


@pytest.fixture(scope="module")
def script_server() -> Iterator[FakeResponsesRetriever]:
    with running(FakeResponsesRetriever()) as fake:
        yield fake


@pytest.fixture
def script(script_server: FakeResponsesRetriever) -> FakeResponsesRetriever:
    script_server.reset()
    return script_server


@pytest.fixture
def proxy(script: FakeResponsesRetriever) -> Iterator[Any]:
    """proxy(**settings) -> an OpenAI client of a proxy in front of the scripted upstream."""
    with proxies(
        script.url,
        lambda url: openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=30),
    ) as start:
        yield start


def create(client: openai.OpenAI, headers: dict[str, str] | None = None, **more: Any) -> Any:
    """The raw response (headers) of a request whose compacted tool output names REF."""
    return client.responses.with_raw_response.create(
        **{**BODY, **more}, extra_headers=headers or {}
    )


def sent(script: FakeResponsesRetriever, i: int) -> dict[str, Any]:
    return orjson.loads(script.requests[i].body)


def prompts(script: FakeResponsesRetriever) -> list[int]:
    return [len(r.body) // 4 for r in script.requests]


def stream_events(client: openai.OpenAI, headers: dict[str, str] | None = None, **more: Any):
    """Every event of the SDK's `responses.stream()` helper, which checks the stream hangs
    together (one response id, each item added before its content and done before the end),
    and its final response is the `response.completed` event's (store off: a stream the server
    keeps does not get the tool, see test_not_offered_where_a_chained_turn_would_break)."""
    more.setdefault("store", False)
    with client.responses.stream(**{**BODY, **more}, extra_headers=headers or {}) as stream:
        events = list(stream)
        assert stream.get_final_response().output == events[-1].response.output
    return events


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_the_shape_reads_a_bare_string_input_as_one_user_message() -> None:
    assert RESPONSES_SHAPE.items({"input": "hi"}) == [{"role": "user", "content": "hi"}]
    assert RESPONSES_SHAPE.items({"input": [{"type": "x"}]}) == [{"type": "x"}]
    u = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 13,
    }
    assert summed([u, u]) == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 8},
        "output_tokens": 6,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 26,
    }


def test_non_stream_serves_the_call_and_the_client_sees_one_response(proxy, script) -> None:
    headers = {"x-script-cached": "3", "x-script-reasoning": "1", "x-script-output-text": "1"}
    raw = create(proxy(), headers)
    out = raw.parse()
    assert len(script.requests) == 2 and raw.headers["x-shrink-retrieve-rounds"] == "1"
    first, second = sent(script, 0), sent(script, 1)
    # Ours after the client's own tools, byte-stable.
    assert first["tools"] == [*TOOLS, RESPONSES_TOOL]
    assert REF in refs_in(str(first["input"]))
    # The continuation: the same body, the round's output items as produced, one output.
    assert {k: v for k, v in second.items() if k != "input"} == {
        k: v for k, v in first.items() if k != "input"
    }
    assert second["input"][: len(first["input"])] == first["input"]
    reasoning, message, call, result = second["input"][len(first["input"]) :]
    assert reasoning == {
        "type": "reasoning",
        "id": "rs_round0",
        "summary": [{"type": "summary_text", "text": "Round 0 thoughts."}],
        "encrypted_content": ENCRYPTED + "0",
    }
    assert orjson.dumps(reasoning) in script.requests[1].body  # as it came, byte for byte
    assert message["id"] == "msg_round0" and message["content"][0]["text"] == "Looking. "
    assert call["type"] == "function_call" and call["name"] == NAME
    assert result["type"] == "function_call_output" and result["call_id"] == call["call_id"]
    assert result["output"].startswith(f"[shrink_retrieve hash={REF}: lines 1-")
    assert FIRST_LINE in result["output"]
    # One response: the last round's id (its stored history is complete), every round's items.
    assert out.id.startswith("resp_round1_") and out.created_at == 1_700_000_000
    assert [i.type for i in out.output] == ["reasoning", "message", "reasoning", "message"]
    assert out.output[2].encrypted_content == ENCRYPTED + "1"
    assert out.output_text.startswith("Looking. I read: [shrink_retrieve hash=")
    assert out.output_text.endswith(FIRST_LINE)
    assert raw.http_response.json()["output_text"] == out.output_text  # recomputed
    assert out.usage.input_tokens == sum(prompts(script))
    assert out.usage.output_tokens == 2 * OUTPUT_TOKENS
    assert out.usage.total_tokens == sum(prompts(script)) + 2 * OUTPUT_TOKENS
    assert out.usage.input_tokens_details.cached_tokens == 6
    assert out.usage.output_tokens_details.reasoning_tokens == 2 * REASONING_TOKENS
    assert f'"name":"{NAME}"' not in orjson.dumps(raw.http_response.json()["output"]).decode()


def test_stream_continues_in_the_same_stream_with_usage_summed(proxy, script) -> None:
    client = proxy()
    with client.responses.stream(
        **BODY, store=False, extra_headers={"x-script-reasoning": "1"}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert len(script.requests) == 2
    second = sent(script, 1)
    appended = second["input"][len(sent(script, 0)["input"]) :]
    assert [i["type"] for i in appended] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert appended[0]["encrypted_content"] == ENCRYPTED + "0"
    text = text_of(events)
    assert text.startswith("Looking. I read: [shrink_retrieve hash=") and FIRST_LINE in text
    assert final.output_text == text
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1 and kinds.count("response.in_progress") == 1
    assert kinds.count("response.completed") == 1 and kinds[-1] == "response.completed"
    assert not any("function_call" in k for k in kinds)
    # One coherent stream: numbers run on across rounds, one id from created to completed.
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1, 2, 3]
    assert final.id == events[0].response.id and final.id.startswith("resp_round0_")
    assert [i.type for i in final.output] == ["reasoning", "message", "reasoning", "message"]
    assert final.usage.input_tokens == sum(prompts(script))
    assert final.usage.output_tokens == 2 * OUTPUT_TOKENS
    assert final.usage.output_tokens_details.reasoning_tokens == 2 * REASONING_TOKENS


def test_stream_iterated_without_the_helper(proxy, script) -> None:
    events = stream_events(proxy())
    assert len(script.requests) == 2
    text = text_of(events)
    assert text.startswith("Looking. I read: ") and FIRST_LINE in text
    (done,) = [e for e in events if e.type == "response.completed"]
    assert done.response.output_text == text
    items = [*(e.item for e in events if hasattr(e, "item")), *done.response.output]
    assert not [i for i in items if i.type == "function_call"]


def test_a_round_without_our_call_goes_out_byte_for_byte(proxy, script) -> None:
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/responses"
    body = {**BODY, "stream": True, "store": False}
    for headers in ({"x-script-quiet": "1"}, {"x-script-quiet": "1", "x-script-both": "1"}):
        script.reset()
        r = httpx.post(url, json=body, headers=headers)
        assert NAME in str(sent(script, 0)["tools"])  # offered, not called
        assert len(script.requests) == 1 and r.content == script.sent[0]


@pytest.mark.parametrize("stream", [False, True])
def test_beside_client_tools_the_client_gets_only_its_own_call(proxy, script, stream) -> None:
    client = proxy()
    headers = {"x-script-both": "1"}
    if stream:
        events = stream_events(client, headers)
        (done,) = [e for e in events if e.type == "response.completed"]
        output = done.response.output
        added = [e.item for e in events if e.type == "response.output_item.added"]
        assert [i.type for i in added] == ["message", "function_call"]
        args = "".join(e.delta for e in events if e.type.endswith("arguments.delta"))
        assert orjson.loads(args) == {"cmd": "ls"}
    else:
        output = create(client, headers).parse().output
    calls = [i for i in output if i.type == "function_call"]
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [("run", {"cmd": "ls"})]
    assert calls[0].call_id == "call_1_0"  # the call the model made again, after the retrieval
    # Round one called both; the continuation kept the round's items as produced (a reasoning
    # item stays followed by what followed it) and answered the client's call NOT_RUN.
    assert len(script.requests) == 2
    appended = sent(script, 1)["input"][len(sent(script, 0)["input"]) :]
    assert [(i["type"], i.get("name")) for i in appended] == [
        ("message", None),
        ("function_call", "run"),
        ("function_call", NAME),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    theirs, ours = appended[3:]
    assert theirs["call_id"] == appended[1]["call_id"] and theirs["output"] == NOT_RUN
    assert ours["call_id"] == appended[2]["call_id"] and ours["output"].startswith(
        f"[shrink_retrieve hash={REF}"
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_hash_never_issued_is_refused_to_the_model(proxy, script, stream) -> None:
    client = proxy()
    headers = {"x-script-hash": "ab" * 12}
    if stream:
        text = text_of(stream_events(client, headers))
    else:
        text = create(client, headers).parse().output_text
    refusal = sent(script, 1)["input"][-1]["output"]
    assert "was not issued in this conversation" in refusal
    assert text == f"Looking. I read: {refusal}"


def test_malformed_arguments_get_a_reason_and_the_loop_goes_on(proxy, script) -> None:
    out = create(proxy(), {"x-script-bad-args": "1"}).parse()
    refusal = sent(script, 1)["input"][-1]["output"]
    assert refusal.startswith("shrink_retrieve: the arguments are not JSON")
    assert out.output_text == f"Looking. I read: {refusal}"


def test_an_expired_hash_says_so(proxy, script) -> None:
    out = create(proxy(store_ttl=0.01), {"x-script-delay": "0.1"}).parse()
    refusal = sent(script, 1)["input"][-1]["output"]
    assert refusal.startswith(f"shrink_retrieve: hash={REF} is no longer kept: expired")
    assert out.output_text.endswith(refusal)


@pytest.mark.parametrize("stream", [False, True])
def test_the_round_limit_strips_our_calls(proxy, script, stream) -> None:
    client = proxy(retrieve_rounds=2)
    headers = {"x-script-always": "1"}
    if stream:
        events = stream_events(client, headers)
        assert not any("function_call" in e.type for e in events)
        (done,) = [e for e in events if e.type == "response.completed"]
        output, text = done.response.output, text_of(events)
        assert done.response.output_text == text
    else:
        raw = create(client, headers)
        assert raw.headers["x-shrink-retrieve-limit"] == "reached"
        assert raw.headers["x-shrink-retrieve-rounds"] == "2"
        out = raw.parse()
        output, text = out.output, out.output_text
    assert len(script.requests) == 3 and text == "Looking. " * 3
    assert [i.type for i in output] == ["message"] * 3


def test_header_off_sends_no_tool_and_plans_the_same(proxy, script) -> None:
    client = proxy()
    raw = create(client, {"x-shrink-retrieve": "off"})
    assert len(script.requests) == 1 and "x-shrink-retrieve-rounds" not in raw.headers
    off = sent(script, 0)
    assert off["tools"] == TOOLS and raw.parse().output_text == "Plain answer."
    script.reset()
    create(client)
    on = sent(script, 0)
    assert on["tools"] == [*TOOLS, RESPONSES_TOOL]
    assert on["input"] == off["input"]  # the same plan: no cut moved with the tool


def test_setting_off_sends_no_tool(proxy, script) -> None:
    raw = create(proxy(retrieve=False))
    assert len(script.requests) == 1 and NAME not in str(sent(script, 0)["tools"])
    assert raw.parse().output_text == "Plain answer."


def test_not_offered_where_a_chained_turn_would_break(proxy, script) -> None:
    """No tool with server-held history, nor in a stream the server stores (its one id would
    be a stored response that ends in our call, unanswered); the input's refs stay."""
    client = proxy()
    create(client, previous_response_id="resp_earlier")
    events = stream_events(client, store=True)
    list(client.responses.create(**BODY, stream=True))  # store left to its default (true)
    assert len(script.requests) == 3
    for i in range(3):
        body = sent(script, i)
        assert body["tools"] == TOOLS and REF in refs_in(str(body["input"]))
    assert text_of(events) == "Plain answer."


def test_a_continuation_error_reaches_the_client_in_openai_shape(proxy, script) -> None:
    client = proxy()
    with pytest.raises(openai.InternalServerError) as info:
        create(client, {"x-script-fail-round": "1"})
    assert info.value.body == {
        "message": "scripted failure",
        "type": "server_error",
        "param": None,
        "code": "boom",
    }
    stream = client.responses.create(
        **BODY, store=False, stream=True, extra_headers={"x-script-fail-round": "1"}
    )
    got = []
    with pytest.raises(openai.APIError, match="scripted failure"):
        for e in stream:
            got.append(e.type)
            if e.type == "response.output_text.delta":
                assert e.delta == "Looking. "  # the first round's text came before the failure
    assert "response.output_text.delta" in got


@pytest.mark.parametrize("round_", ["0", "1"])
def test_a_stream_that_ends_without_its_last_event_ends_in_an_error(proxy, script, round_) -> None:
    client = proxy()
    stream = client.responses.create(
        **BODY, store=False, stream=True, extra_headers={"x-script-cut-round": round_}
    )
    got = []
    with pytest.raises(openai.APIError, match="ended before its last event"):
        for e in stream:
            got.append(e)
    assert len(script.requests) == 1 + int(round_)
    assert not any("function_call" in e.type for e in got)  # ours never went out


def test_a_client_that_leaves_stops_the_loop(proxy, script) -> None:
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/responses"
    body = {**BODY, "stream": True, "store": False}
    with httpx.stream("POST", url, json=body, headers={"x-script-hang-round": "1"}) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                break
    assert script.cancelled.wait(10)  # the continuation was dropped once the client left


def test_first_text_is_not_held_behind_a_round(proxy, script) -> None:
    """Round one's text reaches the client while the model is still writing the call."""
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/responses"
    seen = threading.Event()
    started = time.monotonic()
    with httpx.stream(
        "POST",
        url,
        json={**BODY, "stream": True, "store": False},
        headers={"x-script-chunk-delay": "0.3"},
    ) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                seen.set()
                break
    assert seen.is_set() and time.monotonic() - started < 2.5  # the whole script takes > 5 s


def test_the_client_s_custom_and_function_calls_are_answered_not_run_others_left_out() -> None:
    """A reasoning item stays followed by what followed it (Responses refuses one without its
    following item); Codex's custom tools get their own output type; kinds with outputs of
    their own shapes (computer, shell) are left out, as the model makes them again."""
    from proxy.retrieval.responses_items import calls_in, said

    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": ENCRYPTED, "summary": []}
    patch = {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** x"}
    ours = {"type": "function_call", "call_id": "c2", "name": NAME, "arguments": '{"hash":"x"}'}
    computer = {"type": "computer_call", "call_id": "c3", "action": {}}
    output = [reasoning, patch, ours, computer]
    assert said(output) == [reasoning, patch, ours]
    calls = calls_in(output)
    assert [(c.id, c.name, c.kind, c.arguments) for c in calls] == [
        ("c1", "apply_patch", "custom", "*** x"),
        ("c2", NAME, "function", '{"hash":"x"}'),
    ]
    assert RESPONSES_SHAPE.results(calls, [NOT_RUN, "page"]) == [
        {"type": "custom_tool_call_output", "call_id": "c1", "output": NOT_RUN},
        {"type": "function_call_output", "call_id": "c2", "output": "page"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reasoning_item_our_call_followed_goes_to_the_continuation_not_the_client(
    proxy, script, stream
) -> None:
    """The API refuses a reasoning item without its following item: round one's reasoning,
    followed by our call alone, is the continuation's, and the client's history never holds
    it (Codex sends its history back, store off); the answering round's reasoning is shown."""
    client = proxy()
    headers = {"x-script-reasoning": "1", "x-script-silent": "1"}
    if stream:
        events = stream_events(client, headers)
        output = [i.model_dump() for i in events[-1].response.output]
        added = [e.item.id for e in events if e.type == "response.output_item.added"]
        assert added == [i["id"] for i in output]  # what was streamed is what completed lists
    else:
        output = [i.model_dump() for i in create(client, headers).parse().output]
    assert [(i["type"], i["id"]) for i in output] == [
        ("reasoning", "rs_round1"),
        ("message", "msg_round1"),
    ]
    appended = sent(script, 1)["input"][len(sent(script, 0)["input"]) :]
    assert [(i["type"], i.get("id")) for i in appended[:2]] == [
        ("reasoning", "rs_round0"),
        ("function_call", "fc_round0_0"),
    ]
    assert appended[0]["encrypted_content"] == f"{ENCRYPTED}0"


def test_a_round_without_our_call_keeps_its_reasoning_in_order_byte_for_byte(proxy, script):
    """A reasoning item is held only until the next item is announced: without our call, the
    round goes out as it came."""
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/responses"
    body = {**BODY, "stream": True, "store": False}
    headers = {"x-script-reasoning": "1", "x-script-silent": "1", "x-script-quiet": "1"}
    got = httpx.post(url, json=body, headers={**headers, "x-script-both": "1"}).content
    assert got == script.sent[-1]
    assert b'"type":"reasoning"' in got and b'"name":"run"' in got


@pytest.mark.parametrize("stream", [False, True])
def test_at_the_round_limit_our_call_goes_with_the_reasoning_it_followed(
    proxy, script, stream
) -> None:
    """The last round's call of ours is taken out unserved; the reasoning item right before it
    goes too, or the client's history would hold a reasoning item without its following item."""
    client = proxy(retrieve_rounds=1)
    headers = {"x-script-reasoning": "1", "x-script-silent": "1", "x-script-always": "1"}
    if stream:
        events = stream_events(client, headers)
        output = [i.model_dump() for i in events[-1].response.output]
        assert not [e for e in events if e.type == "response.output_item.added"]
    else:
        raw = create(client, headers)
        assert raw.headers["x-shrink-retrieve-limit"] == "reached"
        output = [i.model_dump() for i in raw.parse().output]
    assert output == [] and len(script.requests) == 2
    # The continuation had round one's reasoning with its call.
    appended = sent(script, 1)["input"][len(sent(script, 0)["input"]) :]
    assert [i["type"] for i in appended] == ["reasoning", "function_call", "function_call_output"]
