"""Any valid JSON text goes through compaction: no exception, never larger, always sendable.

A tool result is text the client controls, and JSON inside it may use every corner of the
grammar: escapes (`\\u0000`, a lone surrogate such as `"\\ud800"`, which Python's json reads
into a str that cannot be encoded as UTF-8), numbers past a float's range (`1e400`), integers
of thousands of digits, repeated keys, any whitespace, and nesting a thousand levels deep. The
texts here are generated as JSON text, not dumped from Python values, so those corners occur.
Whatever stage 1 returns must be a str that orjson can serialise (the proxy re-serialises the
request with it), and a result kept as JSON must still parse as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.pipeline.compact import compact_text
from proxy.pipeline.compact.jsonish import MAX_DEPTH, parse
from proxy.pipeline.facts import extract_facts
from proxy.pipeline.json_outcomes import failure_lines
from tests.pipeline.counters import crude, tik

WHITESPACE = st.sampled_from(["", "", " ", "\n", "\t", "\r\n", "\n    ", "  \n\t "])
ESCAPES = st.sampled_from(
    [
        '\\"',
        "\\\\",
        "\\/",
        "\\b\\f\\n\\r\\t",
        "\\u0000",
        "\\u001f",
        "\\ud800",  # a lone high surrogate
        "\\uDFFF",  # a lone low surrogate
        "\\udc00\\ud800",  # two lone ones, in the wrong order
        "\\ud83d\\ude00",  # a valid pair: one character
        "\\u00e9\\u4e2d",
        "\\uffff",
    ]
)
# Characters a JSON string may hold unescaped (a str from a request never holds a surrogate).
PLAIN = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cs",), exclude_characters='"\\', min_codepoint=0x20
    ),
    max_size=30,
)
STRINGS = st.lists(st.one_of(PLAIN, ESCAPES), max_size=6).map(lambda parts: f'"{"".join(parts)}"')
INTEGERS = st.integers(-(10**40), 10**40).map(str)
# Literals Python reads badly or refuses; rare, since one of them decides a whole document.
CORNERS = st.sampled_from(
    [
        "1e400",  # past a float's range: Python reads it as inf
        "-1E+999",
        "1e-400",
        "1" + "0" * 400 + ".5",  # also past it, without an exponent
        "9" * 5000,  # past Python's int-string conversion limit (4,300 digits)
        "-0",
        "0.0e0",
    ]
)
NUMBERS = st.one_of(
    INTEGERS,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(0, 20).flatmap(lambda n: CORNERS if n == 0 else INTEGERS),
)
SCALARS = st.one_of(st.sampled_from(["null", "true", "false"]), NUMBERS, STRINGS)
KEYS = st.one_of(st.sampled_from(['"id"', '"name"', '"error"', '"status"']), STRINGS)


def _array(items: list[str], ws: str) -> str:
    return "[" + ws + f"{ws},{ws}".join(items) + ws + "]"


def _object(members: list[tuple[str, str]], ws: str) -> str:
    return "{" + ws + f"{ws},{ws}".join(f"{k}{ws}:{ws}{v}" for k, v in members) + ws + "}"


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    objects = st.builds(
        _object,
        st.lists(st.tuples(KEYS, children), max_size=25, unique_by=lambda kv: kv[0]),
        WHITESPACE,
    )
    # A repeated key is valid JSON text too (stage 1 then reads the document as lines); rare,
    # since one decides the whole document.
    repeated = st.builds(
        lambda members, ws: _object([*members, members[0]], ws),
        st.lists(st.tuples(KEYS, children), min_size=1, max_size=5),
        WHITESPACE,
    )
    return st.one_of(
        st.builds(_array, st.lists(children, max_size=40), WHITESPACE),
        st.integers(0, 20).flatmap(lambda n: repeated if n == 0 else objects),
    )


def _nest(depth: int, leaf: str) -> str:
    """`leaf` inside `depth` containers, arrays and objects alternating."""
    opens = "".join("[" if i % 2 else '{"a":' for i in range(depth))
    closes = "".join("]" if i % 2 else "}" for i in reversed(range(depth)))
    return opens + leaf + closes


DOCUMENTS = st.recursive(SCALARS, _containers, max_leaves=300).filter(
    lambda t: t[:1] in "[{"  # a tool result that is a bare scalar is not JSON to stage 1
)
DEEP = st.builds(_nest, st.integers(MAX_DEPTH - 5, 1500), DOCUMENTS | SCALARS)
TEXTS = st.builds(
    lambda ws, doc, trailer: ws + doc + trailer,
    WHITESPACE,
    st.one_of(DOCUMENTS, DEEP, st.builds(_array, st.lists(DOCUMENTS, max_size=30), WHITESPACE)),
    st.sampled_from(["", "", "\n", "\n[exit code: 0]"]),
)


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def check(text: str, limit: int, count: Any) -> None:
    done = compact_text(text, limit, count)
    if done is None:
        assert count(text) <= limit
        return
    assert isinstance(done.text, str)
    orjson.dumps(done.text)  # raises on a lone surrogate: the request could not be sent on
    assert done.tokens_after <= done.tokens_before
    assert count(done.text) == done.tokens_after <= limit
    if done.kind == "json":
        body = done.text.removesuffix("\n[exit code: 0]")
        json.loads(body, parse_constant=_refuse)  # still JSON: no NaN, no Infinity


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=TEXTS, limit=st.sampled_from([64, 100, 300]), count=st.sampled_from([tik, crude]))
@example(text='[{"id": 1, "v": "\\ud800' + "x" * 400 + '"}]', limit=64, count=crude)
@example(text="[" + ", ".join(["1e400"] * 200) + "]", limit=64, count=crude)
@example(text=_nest(1000, '"x"'), limit=64, count=crude)
def test_any_json_text_compacts_without_error(text: str, limit: int, count: Any) -> None:
    check(text, limit, count)


ITEMS = (f'{{"id": {i}, "note": "\\ud800 half of a pair {i}"}}' for i in range(300))
LONE = "[" + ", ".join(ITEMS) + "]"
FAILED = '[{"status": "failed", "name": "\\udc00job"}]'


@pytest.mark.parametrize(
    "text",
    [
        LONE,
        '{"values": [' + ", ".join(["1e400"] * 300) + "]}",
        '{"values": [' + ", ".join(["1" + "0" * 400 + ".5"] * 30) + "]}",
        '{"big": ' + "9" * 5000 + "}",
        _nest(MAX_DEPTH + 1, '"' + "y" * 2000 + '"'),
        _nest(1000, '"' + "y" * 2000 + '"'),
        _nest(5000, "1"),
    ],
    ids=["lone_surrogates", "1e400", "long_float", "huge_int", "past_max_depth", "1000", "5000"],
)
def test_json_corners_compact_to_sendable_text(text: str) -> None:
    for count in (tik, crude):
        check(text, 64, count)


def test_lone_surrogates_come_back_as_escapes() -> None:
    done = compact_text(LONE, 200, crude)
    assert done is not None and done.kind == "json"
    assert "\\ud800 half of a pair 0" in done.text


def test_failure_lines_of_json_with_lone_surrogates_are_sendable() -> None:
    lines = failure_lines(FAILED)
    assert lines == ['"status": "failed", "name": "\\udc00job"']
    orjson.dumps(lines)


def test_json_past_max_depth_is_not_read_as_json() -> None:
    assert parse(_nest(MAX_DEPTH, "1")) is not None
    assert parse(_nest(MAX_DEPTH + 1, "1")) is None
    assert parse(_nest(100_000, "1")) is None  # the C scanner's RecursionError, caught


def test_json_at_max_depth_compacts_on_a_deep_stack() -> None:
    """Within MAX_DEPTH the recursive walks fit in what is left of the stack even when the
    pipeline is called 600 frames deep (the proxy calls it from a few dozen)."""
    # Every level an array whose items report a failure: the deepest path stage 1 walks.
    leaf = '{"error": "boom", "name": "n"}'
    text = leaf
    for _ in range(MAX_DEPTH - 1):
        text = "[" + ", ".join([text, '"error ' + "z" * 30 + '"']) + "]"
    assert parse(text) is not None

    def at_depth(n: int) -> None:
        if n:
            return at_depth(n - 1)
        check(text, 64, crude)
        failure_lines(text)

    assert sys.getrecursionlimit() >= 1000
    at_depth(600)


def test_facts_read_tool_call_arguments_as_deep_as_orjson_reads() -> None:
    """orjson parses arguments up to 1,024 levels; the facts walk their strings iteratively."""
    leaf = '"see /srv/app/main.py"'
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
    for depth in (1000, 1023):
        call["function"]["arguments"] = _nest(depth, leaf)
        orjson.loads(call["function"]["arguments"])
        facts = extract_facts([{"role": "assistant", "content": None, "tool_calls": [call]}])
        assert "/srv/app/main.py" in facts
