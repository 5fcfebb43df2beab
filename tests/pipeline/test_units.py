"""Units: pinned prefix and the spans a history cut may never split."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.pipeline.units import call_ids, group_units, pinned_count


def sys(text: str = "s") -> dict[str, Any]:
    return {"role": "system", "content": text}


def dev() -> dict[str, Any]:
    return {"role": "developer", "content": "d"}


def user(text: str = "u") -> dict[str, Any]:
    return {"role": "user", "content": text}


def asst(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": None, **({"tool_calls": calls} if ids else {})}


def tool(call_id: str | None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "tool", "content": "r"}
    if call_id is not None:
        m["tool_call_id"] = call_id
    return m


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], 0),
        ([sys()], 1),
        ([sys(), dev(), user()], 2),
        ([user(), sys()], 0),  # only a leading run is pinned
        ([sys(), user(), sys()], 1),
        (["junk", sys()], 0),
        ([{"role": None}, sys()], 0),
    ],
)
def test_pinned_count(messages: list[Any], expected: int) -> None:
    assert pinned_count(messages) == expected


@pytest.mark.parametrize(
    ("messages", "start", "expected"),
    [
        ([], 0, []),
        ([user(), asst(), user()], 0, [(0, 1), (1, 2), (2, 3)]),
        ([sys(), user(), asst()], 1, [(1, 2), (2, 3)]),
        # a call and its result
        ([user(), asst("a"), tool("a"), asst()], 0, [(0, 1), (1, 3), (3, 4)]),
        # parallel calls answered out of order
        ([asst("a", "b", "c"), tool("c"), tool("a"), tool("b"), user()], 0, [(0, 4), (4, 5)]),
        # a result for an unknown id is an orphan: it joins an assistant's unit before it...
        ([asst("a"), tool("a"), tool("zz")], 0, [(0, 3)]),
        # ... and stands alone after anything else, so a run of orphans can be cut
        ([user(), tool("zz"), user()], 0, [(0, 1), (1, 2), (2, 3)]),
        ([tool("a"), tool("b"), user()], 0, [(0, 1), (1, 2), (2, 3)]),
        ([sys(), tool("a"), user()], 1, [(1, 2), (2, 3)]),
        # the unit stops at the first message that is not a result
        ([asst("a", "b"), tool("a"), user(), tool("b")], 0, [(0, 2), (2, 3), (3, 4)]),
        # legacy function results behave like tool results
        ([asst(), {"role": "function", "name": "f", "content": "x"}], 0, [(0, 2)]),
        # junk never raises and is a unit of its own
        (["junk", None, tool(None), {"content": None}], 0, [(0, 1), (1, 2), (2, 3), (3, 4)]),
        ([{"role": "assistant", "tool_calls": "nonsense"}, tool("a")], 0, [(0, 2)]),
        ([user()], 5, []),
    ],
)
def test_group_units(messages: list[Any], start: int, expected: list[tuple[int, int]]) -> None:
    assert group_units(messages, start) == expected


def test_call_ids_tolerates_junk() -> None:
    m = {"role": "assistant", "tool_calls": [None, {"id": 3}, {"id": "x"}, {"type": "function"}]}
    assert call_ids(m) == {"x"}
    assert call_ids(user()) == set()
    assert call_ids("junk") == set()


junk = st.sampled_from(["junk", None, 3, {"role": 7}, {"content": None}, {}])
message = st.one_of(
    st.builds(user),
    st.builds(sys),
    st.builds(asst),
    st.lists(st.sampled_from("abc"), max_size=3).map(lambda ids: asst(*ids)),
    st.one_of(st.none(), st.sampled_from("abcz")).map(tool),
    junk,
)


@given(st.lists(message, max_size=25), st.integers(0, 30))
def test_units_partition_and_keep_results_with_their_call(messages: list[Any], start: int) -> None:
    units = group_units(messages, start)
    # a partition of messages[start:] into ordered, non-empty, contiguous spans
    covered = [i for begin, end in units for i in range(begin, end)]
    assert covered == list(range(min(start, len(messages)), len(messages)))
    assert all(begin < end for begin, end in units)
    for n, (begin, end) in enumerate(units):
        head = messages[begin]
        # a unit starts with a result only when no assistant message starts the unit before it
        if n and isinstance(head, dict) and head.get("role") in ("tool", "function"):
            before = messages[units[n - 1][0]]
            assert not (isinstance(before, dict) and before.get("role") == "assistant")
        # every result that answers the head's calls, directly after it, is inside the unit
        ids = call_ids(head)
        i = begin + 1
        while (
            i < len(messages)
            and isinstance(messages[i], dict)
            and (messages[i].get("role") == "tool" and messages[i].get("tool_call_id") in ids)
        ):
            assert i < end
            i += 1
