"""The Responses wire: what the parser takes, refuses and normalises; server-held history."""

from __future__ import annotations

import orjson
import pytest

from proxy.errors import InvalidRequest
from proxy.wire.formats import RESPONSES_WIRE
from proxy.wire.responses import parse_responses, server_history


def parse(body: object) -> dict[str, object]:
    return parse_responses(orjson.dumps(body))


def test_a_string_input_is_one_user_message_and_a_missing_one_none() -> None:
    assert parse({"input": "hi"})["input"] == [{"role": "user", "content": "hi"}]
    assert parse({"previous_response_id": "resp_1"})["input"] == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 3}, "input"),
        ({"input": [{"role": "user", "content": "x"}, "junk"]}, "input[1]"),
        ({"input": "x", "instructions": 3}, "instructions"),
        ({"input": "x", "model": 3}, "model"),
    ],
)
def test_what_is_refused_names_its_param(body: object, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body)
    assert info.value.param == param


def test_unknown_fields_and_items_are_kept() -> None:
    body = {"input": [{"type": "future_item", "x": 1}], "store": False, "novel": {"a": 1}}
    assert parse(body) == body


def test_server_held_history_plans_in_tools_mode() -> None:
    assert server_history({"previous_response_id": "resp_1"})
    assert server_history({"conversation": {"id": "conv_1"}})
    assert not server_history({"previous_response_id": None, "conversation": ""})
    assert server_history({"input": [{"type": "item_reference", "id": "msg_1"}]})
    assert not server_history({"input": [{"role": "user", "content": "item_reference"}]})
    assert RESPONSES_WIRE.plan_mode({"conversation": "conv_1"}, "trim") == ("tools", True)
    assert RESPONSES_WIRE.plan_mode({"conversation": "conv_1"}, "off") == ("off", False)
    assert RESPONSES_WIRE.plan_mode({}, "compact") == ("compact", False)


def test_the_reserve_is_max_output_tokens() -> None:
    assert RESPONSES_WIRE.completion_tokens({"max_output_tokens": 300}, 8192) == 300
    assert RESPONSES_WIRE.completion_tokens({"max_tokens": 300}, 8192) is None
