"""llama.cpp's own /v1/responses through the proxy, with the openai SDK.

What the pinned server (xllamacpp 2026.10.11549) answers there, recorded for the proxy's
/v1/responses route:

- JSON: `usage` is `{"input_tokens": P, "output_tokens": O, "total_tokens",
  "input_tokens_details": {"cached_tokens": C}}` with P the whole prompt (C of it reused from
  the prefix cache). The stream's `response.completed` carries the same usage in
  `response.usage`, and llama.cpp's `timings` (`cache_n`, `prompt_n`) at the event's top level.
- `POST /v1/responses/input_tokens`: `{"input_tokens": N, "object": "response.input_tokens"}`.
- Over the window: its chat route's 400 (`exceed_context_size_error`, "request (P tokens)
  exceeds the available context size (N tokens)"), which `parse_overflow` reads.
- Items it takes: messages (string or parts content, system / developer / user / assistant),
  `function_call` + `function_call_output` (string or parts output), and `reasoning` items
  whose `content` is an array. It refuses a `reasoning` item without `content` or with
  `content: null` ("item['content'] is not an array") and `custom_tool_call` items ("Cannot
  determine type of 'item'"): limits of the server, which the proxy forwards as they are.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from bench.responses_form import codex, pairing_ok, to_responses
from tests.e2e.conftest import MODEL, N_CTX, Llama, ProxyFactory
from tests.e2e.tap import Tap
from tests.e2e.test_llamacpp import LONG, corpus

pytestmark = pytest.mark.e2e

TIMEOUT = 300.0


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def responses(tap: Tap) -> list[Any]:
    with tap.lock:
        return [e for e in tap.exchanges if e.path == "/v1/responses"]


def with_reasoning_content(body: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp wants a reasoning item's `content` as an array (see the docstring)."""
    for item in body["input"]:
        if item.get("type") == "reasoning":
            item["content"] = [{"type": "reasoning_text", "text": "Looking at it."}]
    return body


def test_a_codex_shaped_session_is_shrunk_and_streamed(
    llama_server: Llama, llama_proxy: ProxyFactory, tap: Tap
) -> None:
    body = with_reasoning_content(codex(to_responses({"model": MODEL, "messages": corpus(LONG)})))
    body["max_output_tokens"] = 8
    direct = httpx.post(llama_server.url + "/v1/responses", json=body, timeout=TIMEOUT)
    assert direct.status_code == 400 and b"exceed_context_size_error" in direct.content

    url = llama_proxy()
    with httpx.stream("POST", url + "/v1/responses", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200, r.read()
        assert "trim" in r.headers["x-shrink-actions"]
        raw = r.read()
    names = [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    (*_, sent) = responses(tap)
    assert sent.response == raw  # relayed byte for byte
    forwarded = sent.json()
    assert pairing_ok(forwarded) and forwarded["input"][-1] == body["input"][-1]
    given = {orjson.dumps(i) for i in body["input"] if i.get("type") == "reasoning"}
    kept = [i for i in forwarded["input"] if i.get("type") == "reasoning"]
    assert kept and all(orjson.dumps(i) in given for i in kept)  # byte for byte
    for key in ("include", "store", "prompt_cache_key", "reasoning", "instructions"):
        assert forwarded[key] == body[key]
    completed = orjson.loads(raw.decode().rsplit("data: ", 1)[1])
    assert completed["response"]["usage"]["input_tokens"] <= N_CTX - 8


def test_the_sdk_create_and_input_tokens_through_the_proxy(llama_proxy: ProxyFactory) -> None:
    url = llama_proxy()
    with sdk(url) as client:
        answer = client.responses.create(
            model=MODEL, instructions="Be terse.", input="Say hi.", max_output_tokens=4
        )
    assert answer.output_text.strip() and answer.usage is not None
    counted = httpx.post(
        url + "/v1/responses/input_tokens",
        json={"model": MODEL, "instructions": "Be terse.", "input": "Say hi."},
        timeout=TIMEOUT,
    ).json()
    assert counted == {"input_tokens": answer.usage.input_tokens, "object": "response.input_tokens"}


def test_overflow_is_parsed_and_retried_without_discovery(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    body = to_responses({"model": MODEL, "messages": corpus(LONG), "max_tokens": 8})
    url = llama_proxy(discover_window=False)
    with sdk(url) as client:
        raw = client.responses.with_raw_response.create(
            **body, extra_headers={"x-shrink-mode": "trim"}
        )
    assert raw.http_response.headers["x-shrink-retried"] == "overflow"
    assert raw.parse().output_text.strip()
    first, retry = responses(tap)
    assert first.status == 400 and b"exceed_context_size_error" in first.response
    assert len(first.json()["input"]) == len(body["input"])  # 32768 assumed: nothing dropped
    assert retry.status == 200 and pairing_ok(retry.json())
