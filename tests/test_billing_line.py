"""Claude Code's billing line loses its per-request value, and nothing else changes."""

from __future__ import annotations

import orjson

from bench.anthropic_form import billing_line
from proxy.wire.anthropic import normalise_billing


def body(system: object) -> bytes:
    return orjson.dumps({"model": "m", "system": system, "messages": []})


def test_two_turns_normalise_to_the_same_bytes() -> None:
    a, b = (
        body([{"type": "text", "text": billing_line(t)}, {"type": "text", "text": "You are"}])
        for t in (1, 2)
    )
    assert a != b and normalise_billing(a) == normalise_billing(b)
    out = orjson.loads(normalise_billing(a))
    assert out["system"][0]["text"] == "x-anthropic-billing-header:"
    assert out["system"][1]["text"] == "You are"


def test_the_line_inside_a_longer_text_keeps_the_rest() -> None:
    raw = body(billing_line(1) + "\nYou are Claude Code.")
    assert orjson.loads(normalise_billing(raw))["system"] == (
        "x-anthropic-billing-header:\nYou are Claude Code."
    )


def test_anything_but_plain_fields_is_left_alone() -> None:
    for text in ('x-anthropic-billing-header: a\\"b', "x-anthropic-billing-header: \u00e9"):
        raw = body(text)
        assert normalise_billing(raw) == raw
    assert normalise_billing(body("no header here")) == body("no header here")
