"""SSE framing and the usage tap, on every way a stream can be cut into chunks."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import (
    AnthropicUsageTap,
    EventFramer,
    UsageTap,
    event_json,
    json_usage,
    prompt_tokens,
    split_events,
)


def chunk(i: int) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"delta": {"content": f"t{i}"}}]}) + b"\n\n"


USAGE = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5}}\n\n'
STREAM = chunk(0) + chunk(1) + b": keep-alive comment\n\n" + chunk(2) + USAGE + b"data: [DONE]\n\n"


def feed_in_pieces(tap: UsageTap | AnthropicUsageTap, data: bytes, cuts: list[int]) -> bytes:
    out, last = [], 0
    for c in sorted(set(cuts)) + [len(data)]:
        out.append(tap.feed(data[last:c]))
        last = c
    out.append(tap.close())
    return b"".join(out)


@given(st.lists(st.integers(0, len(STREAM)), max_size=30))
def test_strip_removes_exactly_the_usage_chunk_however_split(cuts):
    tap = UsageTap(strip=True)
    assert feed_in_pieces(tap, STREAM, cuts) == STREAM.replace(USAGE, b"")
    assert prompt_tokens(tap.usage) == 1234


@given(st.lists(st.integers(0, len(STREAM)), max_size=30))
def test_observe_only_is_byte_identical(cuts):
    tap = UsageTap(strip=False)
    assert feed_in_pieces(tap, STREAM, cuts) == STREAM
    assert tap.usage == {"prompt_tokens": 1234, "completion_tokens": 5}


def test_usage_inside_a_content_chunk_is_kept():
    ev = b'data: {"choices":[{"delta":{}}],"usage":{"prompt_tokens":7}}\n\n'
    tap = UsageTap(strip=True)
    assert tap.feed(ev) == ev
    assert prompt_tokens(tap.usage) == 7


def test_crlf_framing_and_incomplete_tail():
    s = EventFramer()
    assert s.feed(b"data: a\r\n\r\ndata: b\r\n") == b"data: a\r\n\r\n"
    assert s.feed(b"\r\n") == b"data: b\r\n\r\n"
    assert s.feed(b"data: tail") == b""
    assert s.flush() == b"data: tail"
    assert split_events(b"data: a\n\ndata: b\r\n\r\n: c\r\r") == [
        b"data: a\n\n",
        b"data: b\r\n\r\n",
        b": c\r\r",
    ]


def test_event_json_and_json_usage_never_raise():
    assert event_json(b"data: {broken\n\n") is None
    assert event_json(b": comment\n\n") is None
    assert event_json(b"event: x\ndata: [1]\n\n") == [1]
    assert json_usage(b"not json") is None
    assert json_usage(b"[]") is None
    assert json_usage(b'{"usage": {"prompt_tokens": 3}}') == {"prompt_tokens": 3}
    assert prompt_tokens({"prompt_tokens": True}) is None


def test_cache_figures_of_openai_and_llamacpp():
    from proxy.sse import cache_fields, json_report, prefix_reuse

    openai_usage = {"prompt_tokens": 500, "prompt_tokens_details": {"cached_tokens": 384}}
    assert cache_fields(openai_usage, None) == {"cached_tokens": 384}
    assert prefix_reuse(cache_fields(openai_usage, None), 500) == (500, 384)
    # llama.cpp (b6xxx): usage with cached_tokens, and timings with cache_n + prompt_n.
    body = (
        b'{"usage":{"prompt_tokens":116,"prompt_tokens_details":{"cached_tokens":115}},'
        b'"timings":{"cache_n":115,"prompt_n":1,"prompt_ms":14.8}}'
    )
    fields = cache_fields(*json_report(body))
    assert fields == {"cached_tokens": 115, "cache_n": 115, "prompt_n": 1}
    assert prefix_reuse(fields, 116) == (116, 115)
    assert cache_fields({"prompt_tokens": 5}, None) == {} and prefix_reuse({}, 5) is None
    assert cache_fields({"prompt_tokens_details": {"cached_tokens": True}}, {"cache_n": -1}) == {}


def test_tap_reads_timings_from_the_usage_chunk_it_strips():
    tap = UsageTap(strip=True)
    stream = (
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":116},"timings":{"cache_n":115,'
        b'"prompt_n":1}}\n\n'
        b"data: [DONE]\n\n"
    )
    out = tap.feed(stream)
    assert b"timings" not in out and out.endswith(b"data: [DONE]\n\n")
    assert tap.timings == {"cache_n": 115, "prompt_n": 1} and tap.usage == {"prompt_tokens": 116}
