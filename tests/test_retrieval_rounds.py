"""The retrieval loop's parts, driven directly: pages that fit the room left (counted with a
real token counter, from a real MemoryStore), usage summed, and a stream round whose model
calls only the client's tools passing byte for byte."""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from proxy.flow import dump_deep
from proxy.pipeline.refs import text_ref
from proxy.retrieval.rounds import NO_ROOM, Call, Rounds, chat_said, summed
from proxy.retrieval.store import MemoryStore
from proxy.retrieval.stream import ChatStream, Turn
from proxy.settings import Settings
from proxy.tokenizers import Tokenizers
from tests.fakes.retriever import sse
from tests.shared_dir import TIKTOKEN_CACHE

TEXT = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(2000))
REF = text_ref(TEXT)


@pytest.fixture(scope="module")
def counter():
    tokens = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE)))
    return tokens.for_model("gpt-4o")


def rounds(counter, room: int, **settings) -> Rounds:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return Rounds(
        content=orjson.dumps(body),
        issued={REF},
        room=room,
        counter=counter,
        settings=Settings(**settings),
        stream=True,
        strip_usage=False,
        dump=dump_deep,
    )


def call(i: int = 0, ref: str = REF) -> Call:
    return Call(f"call_{i}", "shrink_retrieve", orjson.dumps({"hash": ref}).decode())


@pytest.mark.parametrize("room", [200, 1000, 3000, 100_000])
def test_a_page_fits_the_room_left(counter, room):
    store = MemoryStore()
    store.put_sync({REF: TEXT})
    r = rounds(counter, room)
    reply = asyncio.run(r.page(store, call(), room))
    tokens = counter.count_message({"role": "tool", "tool_call_id": "call_0", "content": reply})
    assert reply.startswith(f"[shrink_retrieve hash={REF}: lines 1-") and tokens <= room
    assert len(reply.encode()) <= Settings().retrieve_page_bytes + 200  # the head line


def test_no_room_says_so_and_rounds_add_up(counter):
    store = MemoryStore()
    store.put_sync({REF: TEXT})
    assert asyncio.run(rounds(counter, 10).page(store, call(), 10)) == NO_ROOM
    r = rounds(counter, 3000)
    calls = [call(0), call(1)]
    body = orjson.loads(asyncio.run(r.next_body(store, [chat_said("Looking.", calls)], calls)))
    assistant, *results = body["messages"][1:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0", "call_1"]
    assert r.added == sum(counter.count_message(m) for m in [assistant, *results]) <= 3000
    assert r.served == 1 and body["stream"] is True
    # The second round sees the first one's room taken.
    again = orjson.loads(asyncio.run(r.next_body(store, [chat_said(None, [call(2)])], [call(2)])))
    assert len(again["messages"]) == 6 and r.added <= 3000


def test_usage_is_summed_over_rounds():
    a = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    b = {"prompt_tokens": 15, "completion_tokens": 3, "total_tokens": 18, "x": 1}
    b["prompt_tokens_details"] = {"cached_tokens": 9, "audio_tokens": 0}
    out = summed([{**a, "prompt_tokens_details": {"cached_tokens": 4}}, b])
    assert out == {
        "prompt_tokens": 25,
        "completion_tokens": 5,
        "total_tokens": 30,
        "x": 1,
        "prompt_tokens_details": {"cached_tokens": 13, "audio_tokens": 0},
    }
    assert summed([a]) is a


def drive(stream: ChatStream, events: list[bytes], number: int = 0) -> tuple[bytes, Turn]:
    turn = Turn(number)
    return b"".join(stream.event(e, turn) for e in events), turn


def test_a_round_without_our_call_passes_byte_for_byte(counter):
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": '{"a": 1}'}}
        for i, n in enumerate(["run", "edit"])
    ]
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    events = sse("r", "Let me run it.", calls, "tool_calls", usage)
    out, turn = drive(ChatStream(None, None, rounds(counter, 1000)), events)  # type: ignore[arg-type]
    assert out == b"".join(events) and not turn.continuing


def test_our_call_among_the_clients_is_served_and_at_the_limit_taken_out(counter):
    calls = [
        {"id": "c0", "type": "function", "function": {"name": "run", "arguments": "{}"}},
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "shrink_retrieve", "arguments": "{}"},
        },
    ]
    events = sse("r", "Hm.", calls, "tool_calls", None)
    r = rounds(counter, 1000)
    out, turn = drive(ChatStream(None, None, r), events)  # type: ignore[arg-type]
    assert turn.continuing and [c.id for c in turn.ours] == ["c1"]
    assert b"tool_calls" not in out and b"[DONE]" not in out and b"Hm." in out
    r.served = r.settings.retrieve_rounds  # the limit: the client's call goes out, ours not
    stream = ChatStream(None, None, r)  # type: ignore[arg-type]
    stream.first = {"id": "first", "created": 7, "model": "m0"}
    out, turn = drive(stream, events, number=1)
    chunks = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    deltas = [t for c in chunks for t in c["choices"][0]["delta"].get("tool_calls", [])]
    assert {t["index"] for t in deltas} == {0} and deltas[0]["function"]["name"] == "run"
    assert b"shrink_retrieve" not in out and r.limited
    assert {c["id"] for c in chunks} == {"first"}
    assert "role" not in chunks[0]["choices"][0]["delta"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
