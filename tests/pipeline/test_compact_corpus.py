"""Compaction over every tool message of the dev corpus: fit, idempotence, valid JSON, needles."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from proxy.pipeline.compact import compact_text
from tests.pipeline.counters import tik
from tests.shared_dir import CORPUS

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="evaluation corpus not available")


@cache
def conversations() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(p.read_text()) for p in sorted(CORPUS.glob("*.json")))


def tool_texts() -> list[tuple[str, int, str]]:
    return [
        (c["id"], i, m["content"])
        for c in conversations()
        for i, m in enumerate(c["messages"])
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]


@pytest.mark.parametrize("budget", [256, 512, 1024, 2048])
def test_every_tool_message_fits_and_is_stable(budget: int) -> None:
    for cid, i, text in tool_texts():
        r = compact_text(text, budget, tik)
        before = tik(text)
        if before <= budget:
            assert r is None
            continue
        assert r is not None, (cid, i)
        assert r.tokens_before == before
        assert tik(r.text) == r.tokens_after <= budget, (cid, i)
        assert r.tokens_after < before
        assert compact_text(r.text, budget, tik) is None  # idempotent
        assert compact_text(text, budget, tik) == r  # deterministic
        assert "shrink-proxy" in r.text or "more times" in r.text, (cid, i)
        if r.kind == "json":
            _, end = json.JSONDecoder().raw_decode(r.text)
            assert r.text[end:].count("\n") <= 3  # at most a short trailer after the JSON


def test_crude_counter_fits_too() -> None:
    def crude(s: str) -> int:
        return len(s.encode()) // 4 + 1

    for cid, i, text in tool_texts():
        r = compact_text(text, 512, crude)
        if r is not None:
            assert crude(r.text) <= 512, (cid, i)


def test_critical_tool_needles_survive_at_1024() -> None:
    lost = []
    for c in conversations():
        for needle in c["needles"]:
            message = c["messages"][needle["message_index"]]
            if needle["class"] != "critical" or message.get("role") != "tool":
                continue
            r = compact_text(message["content"], 1024, tik)
            text = message["content"] if r is None else r.text
            if needle["answer"] not in text:
                lost.append((c["id"], needle["answer"]))
    assert lost == []
