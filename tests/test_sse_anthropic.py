"""The Anthropic Messages stream's usage tap and usage figures, beside chat's unchanged ones."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import (
    AnthropicUsageTap,
    anthropic_prompt_tokens,
    anthropic_stream_end,
    cache_fields,
    chat_stream_end,
    json_report,
    prefix_reuse,
    prompt_tokens,
)
from tests.test_sse import feed_in_pieces


def ev(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# As Anthropic's API sends it: the input figures at the start, cumulative figures at the end.
START_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 300,
    "cache_read_input_tokens": 4000,
    "output_tokens": 1,
    "service_tier": "standard",
}
STREAM = b"".join(
    [
        ev(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude",
                    "usage": START_USAGE,
                },
            },
        ),
        ev(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ev("ping", {"type": "ping"}),
        ev(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "the usage word"},
            },
        ),
        ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ev(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {
                    "output_tokens": 15,
                    "input_tokens": 12,
                    "cache_read_input_tokens": 4000,
                    "cache_creation_input_tokens": None,
                },
            },
        ),
        ev("message_stop", {"type": "message_stop"}),
    ]
)

# llama.cpp's /v1/messages stream (the pinned xllamacpp build), byte for byte: no ping, no
# cache_creation_input_tokens, no timings; message_delta carries output_tokens only.
LLAMA_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-Se4u",'
    b'"type":"message","role":"assistant","content":[],"model":"smollm2","stop_reason":null,'
    b'"stop_sequence":null,"usage":{"cache_read_input_tokens":20,"input_tokens":1,'
    b'"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"I"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens",'
    b'"stop_sequence":null},"usage":{"output_tokens":8}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


@given(st.lists(st.integers(0, len(STREAM)), max_size=30))
def test_every_byte_passes_and_usage_is_merged_however_split(cuts):
    tap = AnthropicUsageTap()
    assert feed_in_pieces(tap, STREAM, cuts) == STREAM
    # The delta's non-null figures over the start's; its null cache write keeps the start's 300.
    assert tap.usage == {**START_USAGE, "output_tokens": 15}
    assert prompt_tokens(tap.usage) == 12 + 300 + 4000
    assert tap.timings is None


def test_llamacpp_stream_gives_the_prompt_and_its_cache_read():
    tap = AnthropicUsageTap()
    assert tap.inspect(LLAMA_STREAM) == LLAMA_STREAM
    assert tap.usage == {"cache_read_input_tokens": 20, "input_tokens": 1, "output_tokens": 8}
    fields = cache_fields(tap.usage, tap.timings)
    assert prompt_tokens(tap.usage) == 21 and fields == {"cached_tokens": 20}
    assert prefix_reuse(fields, 21) == (21, 20)


def test_timings_are_read_where_a_build_might_put_them():
    tap = AnthropicUsageTap()
    start = ev(
        "message_start",
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 5}, "timings": {"cache_n": 1, "prompt_n": 4}},
        },
    )
    tap.inspect(start)
    assert tap.timings == {"cache_n": 1, "prompt_n": 4}
    tap.inspect(
        ev(
            "message_delta",
            {
                "type": "message_delta",
                "usage": {"output_tokens": 2},
                "timings": {"cache_n": 3, "prompt_n": 2},
            },
        )
    )
    assert tap.timings == {"cache_n": 3, "prompt_n": 2}
    assert prefix_reuse(cache_fields(tap.usage, tap.timings), prompt_tokens(tap.usage)) == (5, 3)


def test_a_delta_without_a_start_still_counts_and_junk_is_ignored():
    tap = AnthropicUsageTap()
    junk = b'event: x\ndata: {"usage": 3}\n\nevent: y\ndata: not json "usage"\n\n'
    assert tap.inspect(junk) == junk and tap.usage is None
    tap.inspect(ev("message_delta", {"type": "message_delta", "usage": {"output_tokens": 2}}))
    assert tap.usage == {"output_tokens": 2} and prompt_tokens(tap.usage) is None


def test_non_stream_body_usage_through_json_report():
    body = orjson.dumps(
        {
            "type": "message",
            "content": [],
            "usage": {"cache_read_input_tokens": 20, "input_tokens": 1, "output_tokens": 8},
        }
    )
    usage, timings = json_report(body)
    assert prompt_tokens(usage) == 21 and cache_fields(usage, timings) == {"cached_tokens": 20}


def test_anthropic_prompt_is_input_plus_cache_reads_and_writes():
    assert anthropic_prompt_tokens({"input_tokens": 7}) == 7
    assert anthropic_prompt_tokens({"input_tokens": 7, "cache_read_input_tokens": None}) == 7
    assert (
        anthropic_prompt_tokens(
            {"input_tokens": 7, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 3}
        )
        == 100
    )
    assert anthropic_prompt_tokens({"input_tokens": True}) is None
    assert anthropic_prompt_tokens({"output_tokens": 3}) is None
    assert anthropic_prompt_tokens(None) is None
    # A cached count alone (no cache_read) is no prefix figure.
    assert cache_fields({"input_tokens": 7}, None) == {}


def test_chat_usage_gives_exactly_what_it_gave_before():
    # Gateways (LiteLLM) add Anthropic's cache fields to chat usage, where prompt_tokens already
    # includes them: a usage with prompt_tokens is read as chat, whatever else it carries.
    litellm = {
        "prompt_tokens": 500,
        "cache_read_input_tokens": 400,
        "input_tokens": 100,
        "prompt_tokens_details": {"cached_tokens": 384},
    }
    assert prompt_tokens(litellm) == 500
    assert cache_fields(litellm, None) == {"cached_tokens": 384}
    assert cache_fields({"prompt_tokens": 5, "cache_read_input_tokens": 4}, None) == {}
    assert prompt_tokens({"prompt_tokens": None, "input_tokens": 9}) is None
    assert prompt_tokens({}) is None and prompt_tokens(None) is None


def test_stream_end_predicates():
    assert anthropic_stream_end(STREAM) and anthropic_stream_end(LLAMA_STREAM)
    assert anthropic_stream_end(b"event:message_stop\ndata: {}\r\n\r\n")
    assert anthropic_stream_end(b'data: {"type": "message_stop"}\n\n')
    assert not anthropic_stream_end(STREAM[: STREAM.rindex(b"event: message_stop")])
    # Text that mentions message_stop inside a delta is not the end.
    text = ev(
        "content_block_delta",
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "message_stop"}},
    )
    assert not anthropic_stream_end(text)
    assert chat_stream_end(b"data: [DONE]\n\n") and not chat_stream_end(LLAMA_STREAM)
