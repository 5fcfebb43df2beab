"""bench/anthropic_form.py: the chat corpus in the Anthropic Messages form, losing nothing."""

from __future__ import annotations

import copy
import itertools
import json
import os

import anthropic
import pytest

from bench import corpus
from bench.anthropic_form import (
    BILLING_PREFIX,
    CLAUDE_CODE_IDENTITY,
    breakpoints,
    claude_code,
    haystack,
    pairing_ok,
    texts,
    to_anthropic,
)
from tests.conftest import CORPUS


def call(id_: str, name: str, arguments: str) -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
CHAT = {
    "model": "m",
    "max_tokens": 64,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
    "tools": TOOLS,
    "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the build."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [call("c1", "run", '{"cmd": "make"}'), call("c2", "run", "not json")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "error: ringbuf.c:12"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "run", "[1, 2]")]},
        {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "done"}]},
        {"role": "assistant", "content": "Fixed."},
        {"role": "assistant", "content": "Anything else?"},
    ],
}


def test_the_mapping_item_by_item():
    before = copy.deepcopy(CHAT)
    body = to_anthropic(CHAT)
    assert CHAT == before  # pure: the chat body is not touched
    assert body == {
        "model": "m",
        "stream": True,
        "temperature": 0,
        "max_tokens": 64,
        "system": "You are an agent.",
        "tools": [
            {
                "name": "run",
                "description": "Run a command",
                "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ],
        "messages": [
            {"role": "user", "content": "Fix the build."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "c1", "name": "run", "input": {"cmd": "make"}},
                    {"type": "tool_use", "id": "c2", "name": "run", "input": {"raw": "not json"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "error: ringbuf.c:12"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "ok"},
                    {"type": "text", "text": "And now?"},
                ],
            },
            {
                "role": "assistant",
                # JSON that is not an object is no valid `input`: kept whole as raw text.
                "content": [
                    {"type": "tool_use", "id": "c3", "name": "run", "input": {"raw": "[1, 2]"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c3",
                        "content": [{"type": "text", "text": "done"}],
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Fixed."},
                    {"type": "text", "text": "Anything else?"},
                ],
            },
        ],
    }
    assert pairing_ok(body)


@pytest.mark.parametrize(
    ("chat", "expected"),
    [
        # several leading system/developer messages: text blocks
        (
            [
                {"role": "system", "content": "A"},
                {"role": "developer", "content": [{"type": "text", "text": "B"}]},
                {"role": "user", "content": "q"},
            ],
            {"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
        ),
        # a system message later on: user text, merged with its user neighbour
        (
            [{"role": "user", "content": "q"}, {"role": "system", "content": "late"}],
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "q"},
                            {"type": "text", "text": "late"},
                        ],
                    }
                ]
            },
        ),
        # images: a data URL becomes base64, another URL a URL source
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                }
            ],
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "see"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBO",
                                },
                            },
                            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                        ],
                    }
                ]
            },
        ),
    ],
)
def test_table(chat, expected):
    body = to_anthropic({"model": "m", "messages": chat})
    assert {k: body[k] for k in expected} == expected
    assert body["max_tokens"] == 1024


def test_options_carry_over():
    body = to_anthropic(
        {
            "messages": [],
            "max_completion_tokens": 9,
            "stop": "END",
            "tool_choice": "required",
            "n": 2,
            "top_p": 0.5,
        }
    )
    assert body == {
        "max_tokens": 9,
        "top_p": 0.5,
        "messages": [],
        "stop_sequences": ["END"],
        "tool_choice": {"type": "any"},
    }
    named = {"type": "function", "function": {"name": "run"}}
    assert to_anthropic({"messages": [], "tool_choice": named})["tool_choice"] == {
        "type": "tool",
        "name": "run",
    }
    assert to_anthropic({"messages": [], "tool_choice": "none"})["tool_choice"] == {"type": "none"}


def test_pairing_ok_catches_what_the_api_rejects():
    ok = to_anthropic(CHAT)
    assert pairing_ok(ok)
    orphan = copy.deepcopy(ok)
    del orphan["messages"][2]["content"][1]  # c2's result gone
    assert not pairing_ok(orphan)
    late = copy.deepcopy(ok)
    late["messages"][2]["content"].insert(0, {"type": "text", "text": "first"})
    assert not pairing_ok(late)  # results must come before text


def conversations() -> list[corpus.Conversation]:
    if not CORPUS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"corpus missing: {CORPUS}", pytrace=False)
        pytest.skip(f"corpus not found at {CORPUS}")
    return corpus.load(CORPUS)


def chat_texts(messages: list[dict]) -> list[str]:
    return [t for t in corpus.haystack(messages).split("\0") if t]


def test_dev_corpus_converts_whole_paired_alternating_and_keeps_its_needles():
    for conv in conversations():
        chat = conv.request()
        body = to_anthropic(chat)
        messages = body["messages"]
        assert pairing_ok(body), conv.id
        assert body["system"] == conv.messages[0]["content"], conv.id
        roles = [m["role"] for m in messages]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), conv.id
        assert [t["name"] for t in body["tools"]] == [t["function"]["name"] for t in conv.tools]
        calls = [c["id"] for m in conv.messages for c in m.get("tool_calls") or []]
        uses = [
            b["id"]
            for m in messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
        assert uses == calls, conv.id  # every call, in order
        # Every text survives, in order, byte for byte (arguments as their parsed JSON).
        found = texts(body)
        chat_side = [t for m in conv.messages if m["role"] != "system" for t in chat_texts([m])]
        args = {
            c["function"]["arguments"] for m in conv.messages for c in m.get("tool_calls") or []
        }
        plain = [t for t in chat_side if t not in args]
        kept = [t for t in found if t in set(plain)]
        assert kept == plain, conv.id
        for a in args:
            assert json.dumps(json.loads(a), ensure_ascii=False) in found or a in found
        hay = haystack(body)
        for needle in conv.needles:
            if needle.answer in corpus.haystack(conv.messages):
                assert needle.answer in hay, (conv.id, needle.question)


def test_claude_code_shape():
    body = to_anthropic(CHAT)
    before = copy.deepcopy(body)
    headers, one = claude_code(body, 1)
    _, two = claude_code(body, 2)
    assert body == before  # pure
    assert headers["anthropic-beta"].startswith("claude-code-") and headers["x-app"] == "cli"
    first = one["system"][0]["text"]
    assert (
        first.startswith(BILLING_PREFIX)
        and "cch=" in first
        and "cache_control" not in one["system"][0]
    )
    assert one["system"][1]["text"] == CLAUDE_CODE_IDENTITY
    assert one["system"][2]["text"] == "You are an agent."
    # Only the billing line changes from one request to the next.
    assert first != two["system"][0]["text"]
    assert {**one, "system": one["system"][1:]} == {**two, "system": two["system"][1:]}
    assert breakpoints(one) == 3 and pairing_ok(one)
    for m in one["messages"]:
        if m["role"] == "assistant":
            assert m["content"][0]["type"] == "thinking" and m["content"][0]["signature"]
    assert one["stream"] is True and one["thinking"]["type"] == "enabled"
    assert all(t in haystack(one) for t in texts(body))


def test_dev_corpus_in_claude_code_shape_keeps_pairing_needles_and_breakpoints():
    for conv in conversations():
        body = to_anthropic(conv.request())
        _, shaped = claude_code(body, 7)
        assert pairing_ok(shaped) and breakpoints(shaped) <= 4, conv.id
        hay = haystack(shaped)
        assert all(t in hay for t in texts(body)), conv.id


def test_the_sdk_sends_the_claude_code_shape(anthropic_upstream):
    headers, body = claude_code(to_anthropic(CHAT), 3)
    del body["stream"]
    extra = {"temperature": body.pop("temperature")}  # anthropic 2.x takes it only as extra_body
    with (
        anthropic.Anthropic(base_url=anthropic_upstream.url, api_key="k", max_retries=0) as sdk,
        sdk.messages.stream(**body, extra_headers=headers, extra_body=extra) as stream,
    ):
        stream.get_final_message()
    sent = anthropic_upstream.last
    assert sent.header("anthropic-beta") == headers["anthropic-beta"]
    got = sent.json()
    assert got["system"] == body["system"] and got["messages"] == body["messages"]
    assert got["temperature"] == 0 and got["thinking"] == body["thinking"]
