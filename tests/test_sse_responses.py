"""The Responses stream's edges: its usage tap, its last event, its in-band error event."""

from __future__ import annotations

import orjson

from proxy.errors import UpstreamUnavailable, responses_sse_error_frame
from proxy.sse import ResponsesUsageTap, cache_fields, prompt_tokens, responses_stream_end
from tests.fakes.responses import FakeResponses

USAGE = {
    "input_tokens": 33,
    "output_tokens": 4,
    "total_tokens": 37,
    "input_tokens_details": {"cached_tokens": 32},
}


def stream() -> bytes:
    fake = FakeResponses()
    response = fake.response({"model": "m"}, fake.output("text", {}, 3, True), 33, 4)
    response["usage"] = USAGE
    return b"".join(FakeResponses.events(response))


def test_the_tap_reads_the_usage_of_response_completed_and_changes_nothing() -> None:
    raw = stream()
    tap = ResponsesUsageTap()
    out = b"".join(tap.feed(raw[i : i + 7]) for i in range(0, len(raw), 7)) + tap.close()
    assert out == raw
    assert tap.usage == USAGE
    assert prompt_tokens(tap.usage) == 33  # the whole prompt, cached part included
    assert cache_fields(tap.usage, None) == {"cached_tokens": 32}


def test_llamacpps_timings_beside_the_response_are_read() -> None:
    event = {
        "type": "response.completed",
        "response": {"usage": USAGE},
        "timings": {"cache_n": 32, "prompt_n": 1},
    }
    tap = ResponsesUsageTap()
    tap.feed(b"event: response.completed\ndata: " + orjson.dumps(event) + b"\n\n")
    assert cache_fields(tap.usage, tap.timings) == {
        "cached_tokens": 32,
        "cache_n": 32,
        "prompt_n": 1,
    }


def test_the_last_event_is_a_response_end() -> None:
    events = FakeResponses.events(FakeResponses().response({}, [], 1, 1))
    assert responses_stream_end(events[-1])
    assert not any(responses_stream_end(e) for e in events[:-1])
    failed = b'event: response.failed\ndata: {"type":"response.failed","response":{}}\n\n'
    assert responses_stream_end(failed)
    # A delta whose text mentions the name is no end.
    delta = orjson.dumps({"type": "response.output_text.delta", "delta": "response.completed"})
    assert not responses_stream_end(b"data: " + delta + b"\n\n")
    assert not responses_stream_end(b'data: {"type": 3, "x": "response.completed"}\n\n')


def test_the_error_event_has_the_type_codex_reads_and_the_error_the_sdk_raises() -> None:
    frame = responses_sse_error_frame(UpstreamUnavailable("the upstream went away"))
    assert frame.startswith(b"event: error\ndata: ") and frame.endswith(b"\n\n")
    data = orjson.loads(frame.split(b"data: ", 1)[1])
    assert data["type"] == "error" and data["message"] == "the upstream went away"
    assert data["error"]["message"] == "the upstream went away"
