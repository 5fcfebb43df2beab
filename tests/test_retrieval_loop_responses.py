"""The in-flight retrieval loop on the Responses API (`/v1/responses`) over real HTTP: the real
`openai` SDK as the client, the proxy and a scripted upstream that calls `shrink_retrieve` for
the hash its markers name (tests/fakes/retriever_responses.py), each under uvicorn on
127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import openai
import orjson
import pytest

from bench.responses_form import to_responses
from proxy.app import create_app
from proxy.pipeline.refs import refs_in, text_ref
from proxy.retrieval.responses_items import RESPONSES_SHAPE, summed
from proxy.retrieval.tool import NAME, RESPONSES_TOOL
from proxy.settings import Settings
from tests.fakes.retriever_responses import (
    ENCRYPTED,
    OUTPUT_TOKENS,
    REASONING_TOKENS,
    FakeResponsesRetriever,
)
from tests.fakes.server import serve
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
    fake = FakeResponsesRetriever()
    with serve(fake.app()) as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
def script(script_server: FakeResponsesRetriever) -> FakeResponsesRetriever:
    script_server.reset()
    return script_server


@pytest.fixture
def proxy(script: FakeResponsesRetriever) -> Iterator[Any]:
    """proxy(**settings) -> an OpenAI client of a proxy in front of the scripted upstream."""
    with ExitStack() as stack:

        def start(**overrides: Any) -> openai.OpenAI:
            overrides.setdefault("upstream_url", script.url + "/v1")  # type: ignore[attr-defined]
            overrides.setdefault("discover_window", False)
            overrides.setdefault("tool_max_tokens", 256)
            url = stack.enter_context(serve(create_app(Settings(**overrides))))
            client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=30)
            return stack.enter_context(client)

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


def test_beside_client_tools_the_client_gets_only_its_own_call(proxy, script) -> None:
    output = create(proxy(), {"x-script-both": "1"}).parse().output
    calls = [i for i in output if i.type == "function_call"]
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [("run", {"cmd": "ls"})]
    assert calls[0].call_id == "call_1_0"  # the call the model made again, after the retrieval
    # Round one called both; the continuation saw only the retrieval call and its result.
    assert len(script.requests) == 2
    appended = sent(script, 1)["input"][len(sent(script, 0)["input"]) :]
    assert [(i["type"], i.get("name")) for i in appended] == [
        ("message", None),
        ("function_call", NAME),
        ("function_call_output", None),
    ]


def test_a_hash_never_issued_is_refused_to_the_model(proxy, script) -> None:
    text = create(proxy(), {"x-script-hash": "ab" * 12}).parse().output_text
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


def test_the_round_limit_strips_our_calls(proxy, script) -> None:
    raw = create(proxy(retrieve_rounds=2), {"x-script-always": "1"})
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


def test_not_offered_with_server_held_history(proxy, script) -> None:
    """No tool with `previous_response_id`: the proxy cannot count the history the server
    holds, and its markers were issued by other requests; the input's refs stay."""
    create(proxy(), previous_response_id="resp_earlier")
    assert len(script.requests) == 1
    body = sent(script, 0)
    assert body["tools"] == TOOLS and REF in refs_in(str(body["input"]))


def test_a_continuation_error_reaches_the_client_in_openai_shape(proxy, script) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        create(proxy(), {"x-script-fail-round": "1"})
    assert info.value.body == {
        "message": "scripted failure",
        "type": "server_error",
        "param": None,
        "code": "boom",
    }
