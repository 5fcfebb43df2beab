"""llama.cpp's own server on the Anthropic Messages API, called directly with the anthropic SDK.

What the pinned server (xllamacpp 2026.10.11549, llama-server's code) answers there, recorded
for the proxy's /v1/messages route:

- `POST /v1/messages` (JSON): `usage` is `{"cache_read_input_tokens": C, "input_tokens": I,
  "output_tokens": O}`. `input_tokens` excludes the prompt tokens reused from its prefix cache
  (C), as Anthropic's does, so the prompt is I + C (the same prompt twice: 21 = 0 + 21, then
  20 + 1). There is no `cache_creation_input_tokens` and no llama.cpp `timings` (no
  `cache_n`/`prompt_n`) on this route: `cache_read_input_tokens` is the only prefix figure.
- Its stream: `message_start` (whose `message.usage` has the same three fields, output 0),
  `content_block_start`, `content_block_delta` (`text_delta`) ..., `content_block_stop`,
  `message_delta` (`usage` = `{"output_tokens": O}` only), `message_stop`; no `ping`, no
  `timings`. Headers: `text/event-stream`, `x-accel-buffering: no`.
- `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the whole prompt (I + C above).
- Over the window, on both the JSON and the stream request: status 400 before any event, with
  its chat route's body, not Anthropic's shape: `{"error": {"code": 400, "message": "request (P
  tokens) exceeds the available context size (N tokens), try increasing it", "type":
  "exceed_context_size_error", "n_prompt_tokens": P, "n_ctx": N}}`, which `parse_overflow`
  already reads (limit N, prompt P). Its other errors are OpenAI-shaped too (a bad body: 400
  `invalid_request_error`; an unknown path: 404 `not_found_error`, message "File Not Found").
- It accepts Claude Code's request shape (system blocks with `cache_control`, thinking blocks
  with signatures, `metadata`, `anthropic-beta`), and its prefix cache shows what the billing
  line costs: 25 of 396 prompt tokens reused on the next turn with it, 356 of 357 without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from bench.anthropic_form import claude_code, to_anthropic
from proxy.overflow import Overflow, parse_overflow
from proxy.sse import AnthropicUsageTap, cache_fields, prefix_reuse, prompt_tokens
from tests.e2e.conftest import MODEL, N_CTX, Llama
from tests.e2e.test_llamacpp import LONG, corpus

pytestmark = pytest.mark.e2e

TIMEOUT = 300.0
SYSTEM = "You are a terse assistant."
HELLO = [{"role": "user", "content": "Say hi."}]
OVER = [{"role": "user", "content": "word " * (3 * N_CTX)}]
# anthropic 2.x has no `temperature` argument any more: sent as an extra body field.
GREEDY = {"temperature": 0}


@pytest.fixture
def sdk(llama_server: Llama) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=llama_server.url, api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


def test_json_usage_excludes_cache_reads_from_input_tokens(sdk: anthropic.Anthropic) -> None:
    counted = sdk.messages.count_tokens(model=MODEL, system=SYSTEM, messages=HELLO).input_tokens
    raw = [
        sdk.messages.with_raw_response.create(
            model=MODEL, max_tokens=4, system=SYSTEM, messages=HELLO, extra_body=GREEDY
        )
        for _ in range(2)
    ]
    bodies = [orjson.loads(r.http_response.content) for r in raw]
    for body in bodies:
        assert set(body["usage"]) == {"cache_read_input_tokens", "input_tokens", "output_tokens"}
        assert "timings" not in body
        usage = body["usage"]
        assert prompt_tokens(usage) == counted  # input + cache reads: the whole prompt
        assert cache_fields(usage, None) == {"cached_tokens": usage["cache_read_input_tokens"]}
    first, second = (b["usage"] for b in bodies)
    assert second["cache_read_input_tokens"] > 0.8 * counted  # the same prompt: its prefix reused
    assert second["input_tokens"] < first["input_tokens"] + first["cache_read_input_tokens"]
    reuse = prefix_reuse(cache_fields(second, None), prompt_tokens(second))
    assert reuse == (counted, second["cache_read_input_tokens"])
    assert raw[0].parse().content[0].type == "text"


def test_stream_events_and_usage(llama_server: Llama, sdk: anthropic.Anthropic) -> None:
    with sdk.messages.stream(
        model=MODEL, max_tokens=4, system=SYSTEM, messages=HELLO, extra_body=GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0
    counted = sdk.messages.count_tokens(model=MODEL, system=SYSTEM, messages=HELLO).input_tokens
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == counted

    body = {"model": MODEL, "max_tokens": 4, "temperature": 0, "system": SYSTEM}
    r = httpx.post(
        llama_server.url + "/v1/messages",
        json={**body, "messages": HELLO, "stream": True},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    names = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "ping" not in names and b'"timings"' not in r.content
    datas = [orjson.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    start_usage = datas[0]["message"]["usage"]
    assert set(start_usage) == {"cache_read_input_tokens", "input_tokens", "output_tokens"}
    assert set(datas[-2]["usage"]) == {"output_tokens"}
    tap = AnthropicUsageTap()
    assert tap.feed(r.content) + tap.close() == r.content
    assert prompt_tokens(tap.usage) == counted and tap.timings is None


def test_overflow_on_messages_is_its_chat_error_and_parse_overflow_reads_it(
    llama_server: Llama, sdk: anthropic.Anthropic
) -> None:
    counted = sdk.messages.count_tokens(model=MODEL, messages=OVER).input_tokens
    assert counted > N_CTX  # count_tokens answers whatever the window
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model=MODEL, max_tokens=4, messages=OVER)
    assert info.value.status_code == 400
    for stream in (False, True):
        r = httpx.post(
            llama_server.url + "/v1/messages",
            json={"model": MODEL, "max_tokens": 4, "messages": OVER, "stream": stream},
            timeout=TIMEOUT,
        )
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
        error = r.json()["error"]
        assert "type" not in r.json()  # not Anthropic's {"type": "error", ...}
        assert error["type"] == "exceed_context_size_error"
        assert error["message"] == (
            f"request ({counted} tokens) exceeds the available context size ({N_CTX} tokens),"
            " try increasing it"
        )
        assert (error["n_prompt_tokens"], error["n_ctx"]) == (counted, N_CTX)
        assert parse_overflow(r.status_code, r.content) == Overflow(
            limit=N_CTX, prompt_tokens=counted
        )


def test_the_dev_corpus_in_anthropic_form_is_accepted(sdk: anthropic.Anthropic) -> None:
    """bench/anthropic_form.py's output is a valid Messages request for llama.cpp: system,
    tools, tool_use and tool_result blocks all counted (an invalid body would be a 400)."""
    chat = {"model": MODEL, "messages": corpus(LONG), "tools": []}
    body = to_anthropic(chat)
    counted = sdk.messages.count_tokens(
        model=MODEL, system=body["system"], messages=body["messages"]
    ).input_tokens
    assert counted > 3 * N_CTX  # 13k llama.cpp tokens in chat form (tests/e2e/test_llamacpp.py)


def small_session() -> dict[str, Any]:
    """A short agent session in chat form (~400 llama.cpp tokens): it fits the 2048 window."""
    system = "You are a coding agent. Work in small steps and report what you find. " * 12
    return {
        "model": MODEL,
        "max_tokens": 1,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "The build fails; find out why."},
            {
                "role": "assistant",
                "content": "Running the build.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "run", "arguments": '{"cmd": "make"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "ringbuf.c:12: error\n" * 10},
            {"role": "user", "content": "What is on line 12?"},
        ],
    }


def test_claude_code_shape_and_its_billing_line_against_the_prefix_cache(
    sdk: anthropic.Anthropic,
) -> None:
    """llama.cpp takes Claude Code's shape (system blocks with `cache_control`, thinking blocks
    with signatures, `metadata`, `thinking`, the beta header). Its prefix cache then reuses
    almost nothing from one turn to the next while the billing line, the first system block,
    changes per request; with that block gone the whole unchanged prefix is reused. Measured
    (second turn): with the billing line 25 of 396 prompt tokens read from the cache; without
    it 356 of 357."""
    body = to_anthropic(small_session())

    def send(turn: int, *, billing: bool) -> dict[str, Any]:
        headers, shaped = claude_code(body, turn)
        del shaped["stream"], shaped["thinking"]  # SmolLM2 has no thinking mode to switch on
        shaped["max_tokens"] = 1
        if not billing:
            shaped["system"] = shaped["system"][1:]
        r = sdk.messages.with_raw_response.create(**shaped, extra_headers=headers)
        return orjson.loads(r.http_response.content)["usage"]  # type: ignore[no-any-return]

    with_billing = [send(turn, billing=True) for turn in (1, 2)]
    prompt = prompt_tokens(with_billing[1])
    assert prompt is not None and prompt > 300
    # Only the tokens before `cc_version`'s changing suffix are reused: a few dozen at most.
    assert with_billing[1]["cache_read_input_tokens"] < 40
    without = [send(turn, billing=False) for turn in (1, 2)]
    assert without[1]["cache_read_input_tokens"] >= prompt_tokens(without[1]) - 2  # type: ignore[operator]
