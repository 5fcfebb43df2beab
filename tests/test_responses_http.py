"""/v1/responses shrunk in flight: the real openai SDK through the proxy to the fake Responses
upstream (tests/fakes/responses.py), including a long agent conversation that fits only because
the proxy shrank it, Codex's request shape, input_tokens, the overflow retry and
previous_response_id."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import openai
import orjson
import pytest

from bench import corpus
from bench.responses_form import codex, pairing_ok, to_responses
from proxy.app import create_app
from proxy.retrieval.tool import RESPONSES_TOOL
from proxy.settings import Settings
from tests.fakes.responses import ENCRYPTED, FakeResponses, count_tokens
from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer

MODEL = "gpt-fake-codex"
LONG = "dev-04-attrs-maxlen-regression-long"


@pytest.fixture
def fake(responses_upstream: FakeResponses) -> FakeResponses:
    return responses_upstream


@pytest.fixture
def start(fake: FakeResponses) -> Iterator[Any]:
    with ExitStack() as stack:

        def run(**overrides: Any) -> str:
            overrides.setdefault("upstream_url", fake.url + "/v1")
            overrides.setdefault("discover_window", False)
            return stack.enter_context(serve(create_app(Settings(**overrides))))

        yield run


def sdk(url: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-client", max_retries=0, timeout=60, **kw)


def long_body(**extra: Any) -> dict[str, Any]:
    conv = next(c for c in corpus.load() if c.id == LONG)
    return {**to_responses({**conv.request(), "model": MODEL}), **extra}


def test_a_short_request_goes_upstream_byte_for_byte(start: Any, fake: FakeResponses) -> None:
    url = start()
    raw = orjson.dumps({"model": MODEL, "input": "Hello there", "store": False, "metadata": {}})
    r = httpx.post(url + "/v1/responses", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert fake.last.body == raw
    assert r.headers["x-shrink-actions"] == "none"
    with sdk(url) as client:
        answer = client.responses.create(model=MODEL, input="Hello there")
    assert answer.output_text == "tok0 tok1 tok2 "


def test_a_long_agent_conversation_fits_because_it_was_shrunk(
    start: Any, fake: FakeResponses
) -> None:
    body = long_body()
    fake.context_limit = 12_000  # the fake's count: bytes / 4
    assert count_tokens(body) > 4 * fake.context_limit
    url = start(context_window=8192)
    with sdk(url) as client:
        raw = client.responses.with_raw_response.create(**body)
    assert raw.http_response.status_code == 200
    actions = raw.http_response.headers["x-shrink-actions"]
    assert "tools" in actions and "trim" in actions
    sent = orjson.loads(fake.last.body)
    assert count_tokens(sent) <= fake.context_limit
    assert pairing_ok(sent)
    # The client's tools as sent, then the in-flight retrieval tool (the input names refs).
    assert sent["instructions"] == body["instructions"]
    assert sent["tools"] == [*body["tools"], RESPONSES_TOOL]
    assert sent["input"][-1] == body["input"][-1]  # the latest turn intact
    marker = sent["input"][0]
    assert marker["type"] == "message" and "omitted" in marker["content"]
    assert raw.parse().output_text


def test_a_stream_is_relayed_byte_for_byte_and_its_usage_read(
    start: Any, fake: FakeResponses
) -> None:
    url = start(context_window=8192)
    body = {**long_body(), "stream": True}
    r = httpx.post(url + "/v1/responses", json=body, headers={"x-fake-answer": "function_call"})
    assert r.status_code == 200 and r.content == fake.sent
    assert b"event: response.completed" in r.content
    assert b"response.function_call_arguments.delta" in r.content
    stats = httpx.get(url + "/stats").json()
    assert stats["by_api"][0]["api"] == "responses"
    assert 'route="responses"' in httpx.get(url + "/metrics").text


def test_the_sdk_stream_helper(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=8192)
    with sdk(url) as client, client.responses.stream(**long_body()) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "tok0 tok1 tok2 "
    assert final.usage is not None and final.usage.input_tokens == count_tokens(
        orjson.loads(fake.last.body)
    )


def test_a_function_call_loop_through_the_sdk(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=8192)
    tools: list[Any] = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    items: list[Any] = [{"role": "user", "content": "run the tests"}]
    with sdk(url, default_headers={"x-fake-answer": "function_call"}) as client:
        for round_ in range(3):
            answer = client.responses.create(model=MODEL, tools=tools, input=items, store=False)
            call = next(o for o in answer.output if o.type == "function_call")
            items.append(call.model_dump(exclude_none=True))
            log = "\n".join(f"line {i} of round {round_}" for i in range(3000))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": log})
    sent = orjson.loads(fake.last.body)
    assert pairing_ok(sent)
    outputs = [i for i in sent["input"] if i.get("type") == "function_call_output"]
    assert outputs and all("omitted by shrink-proxy" in i["output"] for i in outputs)


def test_codexs_request_shape(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=16384)
    body = codex(long_body())
    assert sum(i["type"] == "reasoning" for i in body["input"] if "type" in i) > 5
    r = httpx.post(url + "/v1/responses", json=body, headers={"x-fake-reasoning": "1"})
    assert r.status_code == 200 and r.content == fake.sent
    assert ENCRYPTED.encode() in r.content  # the reasoning state comes back as sent
    sent = orjson.loads(fake.last.body)
    assert "trim" in r.headers["x-shrink-actions"]
    for key in ("include", "store", "prompt_cache_key", "reasoning", "text", "tool_choice"):
        assert sent[key] == body[key]
    assert sent["parallel_tool_calls"] is False and sent["stream"] is True
    given = {orjson.dumps(i) for i in body["input"] if i.get("type") == "reasoning"}
    kept = [i for i in sent["input"] if i.get("type") == "reasoning"]
    assert kept and all(orjson.dumps(i) in given for i in kept)  # byte for byte
    # Each kept reasoning item still opens its response: the item after it is the model's.
    for i, item in enumerate(sent["input"]):
        if item.get("type") == "reasoning":
            assert sent["input"][i + 1].get("type") == "function_call" or (
                sent["input"][i + 1].get("role") == "assistant"
            )
    assert pairing_ok(sent)


def test_input_tokens_counts_the_request_as_it_would_be_forwarded(
    start: Any, fake: FakeResponses
) -> None:
    url = start(context_window=8192)
    body = long_body()
    r = httpx.post(url + "/v1/responses/input_tokens", json=body)
    assert fake.last.path == "/v1/responses/input_tokens"
    counted = r.json()["input_tokens"]
    assert counted == count_tokens(orjson.loads(fake.last.body)) < count_tokens(body) // 4
    ours = httpx.post(
        url + "/v1/responses/input_tokens", json=body, headers={"x-fake-status": "404"}
    )
    assert ours.json() == {
        "object": "response.input_tokens",
        "input_tokens": int(ours.headers["x-shrink-tokens-after"]),
    }


def test_overflow_is_recovered_at_the_limit_the_upstream_states(
    start: Any, fake: FakeResponses
) -> None:
    fake.context_limit = 6000  # the proxy thinks the window is 32k
    url = start()
    with sdk(url) as client:
        raw = client.responses.with_raw_response.create(**long_body())
    assert raw.http_response.headers["x-shrink-retried"] == "overflow"
    assert count_tokens(orjson.loads(fake.last.body)) <= 6000


def test_server_held_history_only_has_its_tool_outputs_compacted(
    start: Any, fake: FakeResponses
) -> None:
    url = start(context_window=4096)
    body = {**long_body(), "previous_response_id": "resp_earlier"}
    r = httpx.post(url + "/v1/responses", json=body)
    assert r.status_code == 200
    actions = r.headers["x-shrink-actions"]
    assert "previous_response_id:1" in actions and "tools" in actions and "trim" not in actions
    sent = orjson.loads(fake.last.body)
    assert len(sent["input"]) == len(body["input"])  # nothing dropped
    assert sent["previous_response_id"] == "resp_earlier"


def test_errors_are_in_openais_shape(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=4096)
    bad = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": [1]})
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert bad.json()["error"]["param"] == "input[0]"
    upstream = httpx.post(url + "/v1/responses", json=long_body(), headers={"x-fake-status": "503"})
    assert upstream.status_code == 503 and upstream.json()["error"]["message"]


def test_a_dropped_stream_ends_with_an_error_event(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=8192)
    body = {**long_body(), "stream": True}
    with sdk(url, default_headers={"x-fake-drop-after": "3"}) as client:
        with pytest.raises(openai.APIError):
            for _ in client.responses.create(**body):
                pass


def test_the_preview_and_the_cli_plan_a_responses_body(start: Any, tmp_path: Any) -> None:
    url = start(context_window=8192)
    body = long_body()
    r = httpx.post(url + "/v1/shrink?api=responses", json=body)
    assert r.status_code == 200
    assert r.json()["input"][0]["type"] == "message"
    assert "trim" in r.json()["report"]["actions"]
    from proxy.cli import main

    path = tmp_path / "body.json"
    path.write_bytes(orjson.dumps(body))
    assert main(["shrink", str(path), "--api", "responses", "--context-window", "8192"]) == 0


def test_a_string_input_cut_goes_upstream_as_one_user_message(
    start: Any, fake: FakeResponses
) -> None:
    url = start(context_window=4096)
    text = "\n".join(f"log line {i}: collecting tests/test_{i}.py" for i in range(3000))
    r = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": text})
    assert r.status_code == 200 and r.headers["x-shrink-warning"] == "latest-user-cut"
    (item,) = orjson.loads(fake.last.body)["input"]
    assert item["role"] == "user" and "omitted by shrink-proxy" in item["content"]


@pytest.fixture(scope="module")
def summarizer() -> Iterator[FakeSummarizer]:
    fake = FakeSummarizer()
    with serve(fake.app()) as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake


def test_compact_modes_summary_goes_upstream_as_a_message_item(
    start: Any, fake: FakeResponses, summarizer: FakeSummarizer
) -> None:
    url = start(context_window=8192, summary_url=summarizer.url + "/v1")  # type: ignore[attr-defined]
    body = long_body()
    r = httpx.post(url + "/v1/responses", json=body, headers={"x-shrink-mode": "compact"})
    assert r.status_code == 200 and "summary:1" in r.headers["x-shrink-actions"]
    sent = orjson.loads(fake.last.body)["input"]
    assert sent[0]["type"] == "message" and "summary of" in sent[0]["content"]
    assert sent[-1] == body["input"][-1] and pairing_ok({"input": sent})


def test_a_big_body_is_planned_in_a_process(start: Any, fake: FakeResponses) -> None:
    url = start(context_window=8192, process_min_bytes=100_000)
    body = {**long_body(), "store": False, "prompt_cache_key": "k"}
    raw = orjson.dumps(body)
    assert len(raw) > 100_000
    r = httpx.post(url + "/v1/responses", content=raw, timeout=120)
    assert r.status_code == 200 and "trim" in r.headers["x-shrink-actions"]
    sent = orjson.loads(fake.last.body)
    assert list(sent) == list(body)  # every field, in its order
    assert sent["input"][-1] == body["input"][-1] and pairing_ok(sent)
    metrics = httpx.get(url + "/metrics").text
    assert 'shrink_plans_total{where="process"} 1.0' in metrics
