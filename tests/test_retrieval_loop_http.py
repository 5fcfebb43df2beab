"""The in-flight retrieval loop over real HTTP: the real `openai` SDK as the client, the proxy
and a scripted upstream that calls `shrink_retrieve` for the hash its markers name
(tests/fakes/retriever.py), each under uvicorn on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.pipeline.refs import refs_in, text_ref
from proxy.retrieval.tool import CHAT_TOOL, NAME
from tests.fakes.retriever import COMPLETION_TOKENS, FakeRetriever, proxies, running
from tests.test_shrink_http import BIG_LOG, conversation

TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
REF = text_ref(BIG_LOG)
FIRST_LINE = BIG_LOG.splitlines()[0]


@pytest.fixture(scope="module")
def script_server() -> Iterator[FakeRetriever]:
    with running(FakeRetriever()) as fake:
        yield fake


@pytest.fixture
def script(script_server: FakeRetriever) -> FakeRetriever:
    script_server.reset()
    return script_server


@pytest.fixture
def proxy(script: FakeRetriever) -> Iterator[Any]:
    """proxy(**settings) -> an OpenAI client of a proxy in front of the scripted upstream."""
    with proxies(
        script.url,
        lambda url: openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=30),
    ) as start:
        yield start


def create(client: openai.OpenAI, tools=TOOLS, headers=None, **more):
    """The raw response (headers) of a request whose compacted tool result names REF."""
    return client.chat.completions.with_raw_response.create(
        model="fake-model",
        messages=conversation(1, BIG_LOG),
        tools=tools,
        extra_headers=headers or {},
        **more,
    )


def sent(script: FakeRetriever, i: int) -> dict:
    return orjson.loads(script.requests[i].body)


def test_non_stream_serves_the_call_and_the_client_sees_one_answer(proxy, script):
    raw = create(proxy(), headers={"x-script-cached": "3"})
    out = raw.parse()
    assert len(script.requests) == 2 and raw.headers["x-shrink-retrieve-rounds"] == "1"
    first, second = sent(script, 0), sent(script, 1)
    assert NAME in [t["function"]["name"] for t in first["tools"]]
    assert REF in refs_in(str(first["messages"]))
    # The continuation: the same body, the call and its answer (a page of the original).
    assert second["messages"][: len(first["messages"])] == first["messages"]
    call, result = second["messages"][len(first["messages"]) :]
    assert call["tool_calls"][0]["function"]["name"] == NAME and call["content"] == "Looking. "
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert result["content"].startswith(f"[shrink_retrieve hash={REF}: lines 1-")
    assert FIRST_LINE in result["content"]
    message = out.choices[0].message
    assert message.content.startswith("Looking. I read: [shrink_retrieve hash=")
    assert message.content.endswith(FIRST_LINE)
    assert not message.tool_calls and out.choices[0].finish_reason == "stop"
    assert out.id == "chatcmpl-round0" and out.created == 1000
    prompts = [len(r.body) // 4 for r in script.requests]
    assert out.usage.prompt_tokens == sum(prompts)
    assert out.usage.completion_tokens == 2 * COMPLETION_TOKENS
    assert out.usage.total_tokens == sum(prompts) + 2 * COMPLETION_TOKENS
    assert out.usage.prompt_tokens_details.cached_tokens == 6
    assert f'"name":"{NAME}"' not in raw.http_response.text


def stream_chunks(client, **more):
    raw = client.chat.completions.with_raw_response.create(
        model="fake-model",
        messages=conversation(1, BIG_LOG),
        tools=more.pop("tools", TOOLS),
        stream=True,
        extra_headers=more.pop("headers", {}),
        **more,
    )
    return raw, list(raw.parse())


def test_stream_continues_in_the_same_stream_with_usage_summed(proxy, script):
    raw, chunks = stream_chunks(proxy(), stream_options={"include_usage": True})
    assert len(script.requests) == 2
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Looking. I read: [shrink_retrieve hash=") and FIRST_LINE in text
    assert {c.id for c in chunks} == {"chatcmpl-round0"}
    roles = [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role]
    assert roles == ["assistant"]  # the second round's role-only delta suppressed
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    (usage,) = [c.usage for c in chunks if c.usage]
    prompts = [len(r.body) // 4 for r in script.requests]
    assert usage.prompt_tokens == sum(prompts)
    assert usage.completion_tokens == 2 * COMPLETION_TOKENS
    assert f"'name': '{NAME}'" not in str([c.model_dump() for c in chunks])


def test_stream_without_include_usage_gets_no_usage_chunk(proxy, script):
    _, chunks = stream_chunks(proxy())
    assert sent(script, 1)["stream_options"] == {"include_usage": True}  # the proxy asked
    assert not any(c.usage for c in chunks) and not any(not c.choices for c in chunks)


@pytest.mark.parametrize("stream", [False, True])
def test_beside_client_tools_the_client_gets_only_its_own_call(proxy, script, stream):
    client = proxy()
    headers = {"x-script-both": "1"}
    if stream:
        _, chunks = stream_chunks(client, headers=headers)
        calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
        names = [t.function.name for t in calls if t.function and t.function.name]
        assert {t.index for t in calls} == {0}
        args = "".join(t.function.arguments or "" for t in calls)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        message = create(client, headers=headers).parse().choices[0]
        names = [t.function.name for t in message.message.tool_calls]
        args = message.message.tool_calls[0].function.arguments
        finish = message.finish_reason
    assert names == ["run"] and orjson.loads(args) == {"cmd": "ls"} and finish == "tool_calls"
    # Round one called both; the continuation saw only the retrieval call and its result.
    assert len(script.requests) == 2
    first_round = sent(script, 1)["messages"][-2]
    assert [c["function"]["name"] for c in first_round["tool_calls"]] == [NAME]


@pytest.mark.parametrize("stream", [False, True])
def test_a_hash_never_issued_is_refused_to_the_model(proxy, script, stream):
    client = proxy()
    headers = {"x-script-hash": "ab" * 12}
    if stream:
        _, chunks = stream_chunks(client, headers=headers)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = create(client, headers=headers).parse().choices[0].message.content
    refusal = sent(script, 1)["messages"][-1]["content"]
    assert "was not issued in this conversation" in refusal
    assert text == f"Looking. I read: {refusal}"


def test_an_expired_hash_says_so(proxy, script):
    client = proxy(store_ttl=0.01)
    out = create(client, headers={"x-script-delay": "0.1"}).parse()
    refusal = sent(script, 1)["messages"][-1]["content"]
    assert refusal.startswith(f"shrink_retrieve: hash={REF} is no longer kept: expired")
    assert out.choices[0].message.content.endswith(refusal)


@pytest.mark.parametrize("stream", [False, True])
def test_the_round_limit_strips_our_calls(proxy, script, stream):
    client = proxy(retrieve_rounds=2)
    headers = {"x-script-always": "1"}
    if stream:
        _, chunks = stream_chunks(client, headers=headers)
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        raw = create(client, headers=headers)
        assert raw.headers["x-shrink-retrieve-limit"] == "reached"
        assert raw.headers["x-shrink-retrieve-rounds"] == "2"
        choice = raw.parse().choices[0]
        assert not choice.message.tool_calls
        finish, text = choice.finish_reason, choice.message.content
    assert len(script.requests) == 3 and finish == "stop"
    assert text == "Looking. " * 3


def test_header_off_sends_no_tool_and_serves_no_round(proxy, script):
    raw = create(proxy(), headers={"x-shrink-retrieve": "off"})
    assert len(script.requests) == 1 and "x-shrink-retrieve-rounds" not in raw.headers
    assert NAME not in str(sent(script, 0)["tools"])
    assert raw.parse().choices[0].message.content == "Plain answer."


def test_a_continuation_error_reaches_the_client_in_openai_shape(proxy, script):
    client = proxy()
    with pytest.raises(openai.InternalServerError) as info:
        create(client, headers={"x-script-fail-round": "1"})
    assert info.value.body == {
        "message": "scripted failure",
        "type": "server_error",
        "param": None,
        "code": "boom",
    }
    stream = client.chat.completions.create(
        model="fake-model",
        messages=conversation(1, BIG_LOG),
        tools=TOOLS,
        stream=True,
        extra_headers={"x-script-fail-round": "1"},
    )
    got = []
    with pytest.raises(openai.APIError, match="scripted failure"):
        for c in stream:
            got.append(c.choices[0].delta.content if c.choices else None)
    assert "Looking. " in got  # the first round's text arrived before the failure


def test_a_client_that_leaves_stops_the_loop(proxy, script):
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/chat/completions"
    body = {
        "model": "fake-model",
        "messages": conversation(1, BIG_LOG),
        "tools": TOOLS,
        "stream": True,
    }
    with httpx.stream("POST", url, json=body, headers={"x-script-hang-round": "1"}) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                break
    assert script.cancelled.wait(10)  # the continuation was dropped once the client left


def test_first_content_is_not_held_behind_a_round(proxy, script):
    """Round one's text reaches the client while the model is still writing the call."""
    client = proxy()
    url = str(client.base_url).rstrip("/") + "/chat/completions"
    body = {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": TOOLS}
    seen = threading.Event()
    started = time.monotonic()
    with httpx.stream(
        "POST", url, json={**body, "stream": True}, headers={"x-script-chunk-delay": "0.3"}
    ) as r:
        for line in r.iter_lines():
            if "Looking." in line:
                seen.set()
                break
    assert seen.is_set() and time.monotonic() - started < 2.5  # the whole script takes > 3 s


def test_a_proxy_in_front_that_added_the_tool_answers_its_calls(proxy, script):
    """Two proxies in a row: the inner one sees the outer one's tool among the client's, adds
    no second (a duplicate name is refused) and leaves the call to the proxy that offered it."""
    raw = create(proxy(), tools=[*TOOLS, CHAT_TOOL])
    assert len(script.requests) == 1 and "x-shrink-retrieve-rounds" not in raw.headers
    assert [t["function"]["name"] for t in sent(script, 0)["tools"]] == ["run", NAME]
    (call,) = raw.parse().choices[0].message.tool_calls
    assert call.function.name == NAME


@pytest.mark.parametrize("fmt", ["chat", "anthropic", "responses"])
def test_no_room_is_planned_for_a_second_tool_of_our_name(fmt):
    from proxy.tokenizers import Tokenizers
    from proxy.wire.formats import FORMATS

    wire = FORMATS[fmt]
    assert wire.retrieval_tool is not None
    tokens = Tokenizers().for_model("gpt-4o")
    body = {"model": "m", "tools": [{"name": "run", "type": "function"}], "store": False}
    assert wire.tool_room(body, tokens) > 0
    body["tools"].append(wire.retrieval_tool)
    assert wire.tool_room(body, tokens) == 0
