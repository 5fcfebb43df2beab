"""The Messages loop's parts, driven directly: the continuation's shape and the page's fit
(counted as the Anthropic wire format counts, from a real MemoryStore), the tool's room, usage
summed, and a stream round's folding for the cases the scripted upstream does not play (an
`error` event, a text block after a call, a round cut by `max_tokens`, the limit)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
import pytest

from proxy.flow import dump_deep
from proxy.pipeline.refs import text_ref
from proxy.retrieval.messages import MESSAGES_SHAPE, said, summed_usage
from proxy.retrieval.messages_stream import MessagesStream, Turn
from proxy.retrieval.rounds import NOT_RUN, Call, Rounds
from proxy.retrieval.store import MemoryStore
from proxy.retrieval.tool import MESSAGES_TOOL, NAME
from proxy.settings import Settings
from proxy.sse import event_json, split_events
from proxy.tokenizers import Tokenizers
from proxy.wire.formats import ANTHROPIC_WIRE
from tests.fakes.anthropic import sse
from tests.shared_dir import TIKTOKEN_CACHE

TEXT = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(2000))
REF = text_ref(TEXT)
BODY = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def tokens():
    return Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE)))


def rounds(tokens, room: int = 100_000, **settings: Any) -> Rounds:
    return Rounds(
        content=orjson.dumps(BODY),
        issued={REF},
        room=room,
        counter=ANTHROPIC_WIRE.counter(tokens.for_model("claude")),
        settings=Settings(**settings),
        stream=True,
        strip_usage=False,
        dump=dump_deep,
        shape=MESSAGES_SHAPE,
    )


def call(i: int, ref: str = REF) -> Call:
    return Call(f"toolu_{i}", NAME, orjson.dumps({"hash": ref}).decode())


def test_the_tool_room_is_what_the_tool_adds_to_the_fixed_tokens(tokens):
    counter = tokens.for_model("claude")
    body = {**BODY, "tools": [{"name": "run", "input_schema": {"type": "object"}}]}
    room = ANTHROPIC_WIRE.tool_room(body, counter)
    grown = ANTHROPIC_WIRE.fixed_tokens(
        ANTHROPIC_WIRE.with_retrieval_tool(body), counter
    ) - ANTHROPIC_WIRE.fixed_tokens(body, counter)
    assert room > 100 and abs(room - grown) <= 2
    assert ANTHROPIC_WIRE.tool_room(BODY, counter) == 0  # no tools: not an agent
    assert ANTHROPIC_WIRE.with_retrieval_tool(body)["tools"][-1] is MESSAGES_TOOL


@pytest.mark.parametrize("room", [300, 3000])
def test_a_continuation_holds_the_turn_and_one_user_message_of_results(tokens, room):
    store = MemoryStore()
    store.put_sync({REF: TEXT})
    r = rounds(tokens, room)
    blocks = [
        {"type": "thinking", "thinking": "hm", "signature": "sig=="},
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_0", "name": NAME, "input": {"hash": REF}},
        {"type": "tool_use", "id": "toolu_c", "name": "run", "input": {}},
        {"type": "tool_use", "id": "toolu_1", "name": NAME, "input": {"hash": "ab" * 12}},
    ]
    calls = [
        call(0),
        Call("toolu_c", "run", "{}"),
        Call("toolu_1", NAME, orjson.dumps({"hash": "ab" * 12}).decode()),
    ]
    body = orjson.loads(asyncio.run(r.next_body(store, [said(blocks, calls)], calls)))
    turn, results = body["messages"][1:]
    # Echoed whole (as the API wants it with thinking), less the empty text block it refuses.
    assert turn == {"role": "assistant", "content": [blocks[0], *blocks[2:]]}
    assert results["role"] == "user"
    first, theirs, second = results["content"]
    ids = [first["tool_use_id"], theirs["tool_use_id"], second["tool_use_id"]]
    assert ids == ["toolu_0", "toolu_c", "toolu_1"]
    assert first["content"].startswith(f"[shrink_retrieve hash={REF}: lines 1-")
    assert theirs["content"] == NOT_RUN  # the client's call: not run, made again later
    assert "was not issued" in second["content"]
    assert r.added <= room  # the pages fit the room the prompt left
    assert {k: v for k, v in body.items() if k != "messages"} == {
        k: v for k, v in BODY.items() if k != "messages"
    }


def test_usage_is_summed_over_rounds_nested_figures_too():
    one = {
        "input_tokens": 10,
        "output_tokens": 3,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 5,
        "cache_creation": {"ephemeral_5m_input_tokens": 5, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
    }
    two = {**one, "input_tokens": 20, "output_tokens": 4, "cache_creation_input_tokens": None}
    total = summed_usage([one, two])
    assert total["input_tokens"] == 30 and total["output_tokens"] == 7
    assert total["cache_read_input_tokens"] == 200 and total["cache_creation_input_tokens"] == 5
    assert total["cache_creation"] == {
        "ephemeral_5m_input_tokens": 10,
        "ephemeral_1h_input_tokens": 0,
    }
    assert total["service_tier"] == "standard"
    assert summed_usage([one]) is one


def block_events(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[bytes]:
    out = [sse("content_block_start", {"type": "content_block_start", "index": index,
                                       "content_block": start})]  # fmt: skip
    out += [
        sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    return [*out, sse("content_block_stop", {"type": "content_block_stop", "index": index})]


def text(index: int, words: str) -> list[bytes]:
    return block_events(
        index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": words}]
    )


def use(index: int, name: str) -> list[bytes]:
    start = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}
    js = orjson.dumps({"hash": REF}).decode()
    return block_events(index, start, [{"type": "input_json_delta", "partial_json": js}])


def start() -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
               "usage": {"input_tokens": 10, "output_tokens": 1}}  # fmt: skip
    return sse("message_start", {"type": "message_start", "message": message})


def end(stop: str) -> list[bytes]:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": 5}}  # fmt: skip
    return [sse("message_delta", delta), sse("message_stop", {"type": "message_stop"})]


def fold(r: Rounds, events: list[bytes], number: int = 0) -> tuple[bytes, Turn]:
    rs = MessagesStream(None, None, r)  # type: ignore[arg-type]  # event() needs neither
    turn = Turn(number)
    return b"".join(rs.event(e, turn) for e in events), turn


def parsed(out: bytes) -> list[dict[str, Any]]:
    return [event_json(e) for e in split_events(out)]


def test_a_text_block_after_a_call_is_held_and_given_out_in_order(tokens):
    events = [start(), *text(0, "a "), *use(1, "run"), *text(2, "b"), *end("tool_use")]
    out, turn = fold(rounds(tokens), events)
    assert out == b"".join(events) and not turn.continuing


def test_a_round_that_calls_ours_swallows_its_calls_and_end_but_not_later_text(tokens):
    events = [start(), *use(0, "run"), *use(1, NAME), *text(2, "b"), *end("tool_use")]
    out, turn = fold(rounds(tokens), events)
    # Both calls are answered in the continuation: ours with a page, the client's NOT_RUN.
    assert turn.continuing and turn.done
    assert [(c.id, c.name) for c in turn.ours] == [("toolu_0", "run"), ("toolu_1", NAME)]
    got = parsed(out)
    assert [e["type"] for e in got] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop"
    ]  # fmt: skip
    assert {e.get("index") for e in got[1:]} == {0}  # the text renumbered after what was seen


def test_an_error_event_ends_the_round_unserved_without_our_call(tokens):
    error = sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}})
    events = [start(), *text(0, "a"), *use(1, NAME), error]
    out, turn = fold(rounds(tokens), events)
    assert not turn.continuing and NAME.encode() not in out and out.endswith(error)


@pytest.mark.parametrize(
    ("limit", "stop", "told"), [(True, "tool_use", "end_turn"), (False, "max_tokens", "max_tokens")]
)
def test_a_round_that_cannot_continue_loses_our_call(tokens, limit, stop, told):
    r = rounds(tokens)
    r.served = r.settings.retrieve_rounds if limit else 0
    out, turn = fold(r, [start(), *text(0, "a"), *use(1, NAME), *end(stop)])
    assert not turn.continuing and r.limited and NAME.encode() not in out
    (delta,) = [e for e in parsed(out) if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == told


def test_a_later_round_is_renumbered_and_its_end_carries_the_sums(tokens):
    r = rounds(tokens)
    r.note_usage({"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 7})
    rs = MessagesStream(None, None, r)  # type: ignore[arg-type]
    rs.next_index = 2  # the client saw two blocks of round one
    turn = Turn(1)
    out = b"".join(rs.event(e, turn) for e in [start(), *text(0, "c"), *end("end_turn")])
    got = parsed(out)
    assert got[0]["type"] == "content_block_start" and got[0]["index"] == 2  # no message_start
    (delta,) = [e for e in got if e["type"] == "message_delta"]
    assert delta["usage"] == {
        "output_tokens": 10,
        "input_tokens": 110,
        "cache_read_input_tokens": 7,
    }
