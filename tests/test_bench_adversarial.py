"""bench.adversarial's case generators build the bodies they advertise (no planning, no timing).

A generator that drifted (a size ignored, a tool result orphaned, a body too big for the limit)
would make the benchmark measure something other than its name says, or the proxy refuse it.
"""

from __future__ import annotations

import re

import orjson
import pytest

from bench.adversarial import cases, hostile, shapes, texts
from bench.adversarial.patterns import compiled_patterns
from bench.corpus import pairing_ok
from proxy.settings import Settings

EXPLICIT = cases.explicit()
BUILT = {(g.name, size): g.build(size) for g in EXPLICIT for size in g.smoke}  # built once: ~1 s


def _tool_results(body):
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def _depth(text: str) -> int:
    return len(re.match(r'(\[|\{"a": )*', text).group(0)) // (1 if text[0] == "[" else 6)


@pytest.mark.parametrize(("name", "size"), sorted(BUILT))
def test_each_smoke_case_is_a_valid_request_of_its_size(name, size):
    gen = next(g for g in EXPLICIT if g.name == name)
    case = BUILT[name, size]
    body = case.body
    raw = orjson.dumps(body)
    assert isinstance(body["model"], str) and body["messages"]
    assert body["messages"][-1]["role"] == "user"
    assert orjson.loads(raw) == body
    assert len(raw) < Settings.model_fields["max_body_bytes"].default
    if name != "orphan-results":
        assert pairing_ok(body["messages"]), "every call answered, every result called"
    if gen.unit == "bytes":
        assert 0.6 * size <= len(raw) <= 1.4 * size
    elif gen.unit == "messages":
        assert len(body["messages"]) == size
    elif gen.unit == "depth":
        deep = [m for m in body["messages"] if m.get("tool_calls")]
        texts_ = [c["function"]["arguments"] for m in deep for c in m["tool_calls"]]
        assert max(_depth(t) for t in [*texts_, *_tool_results(body)]) == size
    elif gen.unit == "calls":
        calls = [m for m in body["messages"] if m.get("tool_calls")]
        assert len(calls[0]["tool_calls"]) == size == len(_tool_results(body))
    elif gen.unit == "lines":
        assert max(t.count("\n") + 1 for t in _tool_results(body)) == size
    elif gen.unit == "parts":
        assert any(isinstance(c, list) and len(c) == size for c in _tool_results(body))
    elif gen.unit == "tools":
        assert len(body["tools"]) == size
    elif gen.unit == "tokens":
        assert len(body["messages"]) == 4 and len(body["messages"][1]["content"]) >= size * 4
    else:
        pytest.fail(f"unknown unit {gen.unit}")


def test_cases_are_deterministic():
    for gen in EXPLICIT[:12]:
        size = gen.smoke[0]
        assert orjson.dumps(gen.build(size).body) == orjson.dumps(BUILT[gen.name, size].body)


def test_full_sizes_reach_the_issue_and_stay_under_the_body_limit():
    by_name = {g.name: g for g in EXPLICIT}
    limit = Settings.model_fields["max_body_bytes"].default
    assert 50 * cases.MB <= max(by_name["near-limit"].full) < limit
    assert max(by_name["messages-4k"].full) == 16_000
    assert {1000, 1024} <= set(by_name["deep-args"].full) | set(by_name["deep-array"].full)
    for g in EXPLICIT:
        assert min(g.full) >= min(g.smoke) or g.name.startswith("dropped"), g.name


def test_one_generator_per_compiled_pattern_and_their_bodies():
    gens = hostile.generators()
    assert len(gens) == len(compiled_patterns())
    assert len({g.name for g in gens}) == len(gens)
    for gen in gens[:: len(gens) // 6]:
        body = gen.build(gen.smoke[0]).body
        raw = orjson.dumps(body)
        assert 0.6 * gen.smoke[0] <= len(raw) <= 2 * gen.smoke[0]
        assert pairing_ok(body["messages"])
        assert len(_tool_results(body)) == 4  # bare, log, source, JSON


def test_hostile_lines_hold_long_and_short_strings_of_the_pattern():
    pattern = compiled_patterns()["proxy.pipeline.compact.outline._C_FUNCTION"]
    lines = hostile.hostile_lines(pattern, 64 * 1024)
    assert max(map(len, lines)) >= 8 * 1024
    assert any(line.startswith("a*a*") or "*a*a" in line for line in lines)
    assert sum(map(len, lines)) >= 24 * 1024


def test_texts_are_what_they_say():
    assert orjson.loads(texts.deep_json(1024)) is not None  # orjson's limit
    assert orjson.loads(texts.json_records(20_000))
    assert orjson.loads(texts.json_escapes(20_000))
    assert "\n" not in texts.words_line(10_000, emoji=True)
    assert max(map(ord, texts.words_line(10_000, emoji=True))) > 0xFFFF
    assert len(texts.short_lines(1000).split("\n")) == 1000
    session = shapes.session(101)
    assert len(session) == 101 and pairing_ok(session)
