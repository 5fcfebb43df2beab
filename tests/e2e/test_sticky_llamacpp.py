"""The cut stays put on llama.cpp's real server, whose tokenizer is not tiktoken's.

A real agent session replayed turn by turn through the proxy (window discovered from `/props`,
calibration learning from the server's own counts), with a client that varies `max_tokens`
between turns, so the budget moves under the conversation on every turn. The server's own
`timings` say what it re-read: a turn whose cut holds must reuse the whole previous prompt.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.conftest import MODEL, N_CTX, ProxyFactory
from tests.e2e.tap import Tap
from tests.e2e.test_llamacpp import TIMEOUT, actions, corpus

pytestmark = pytest.mark.e2e

SESSION = "dev-04-attrs-maxlen-regression-long"
RESERVES = (8, 160, 48, 300, 24, 96)  # the budget moves on every turn
TURNS = 12  # the last turns of the session, where it has long outgrown the window


def agent_turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The requests an agent sends: before every assistant message, then the whole thing."""
    out = [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    return [*out, messages]


def test_the_cut_never_moves_back_and_the_server_reuses_the_prefix(
    llama_proxy: ProxyFactory, tap: Tap
) -> None:
    url = llama_proxy()
    requests = agent_turns(corpus(SESSION))[-TURNS:]
    seen: list[tuple[int, int, int, int]] = []  # (dropped, budget, prompt_n, cache_n)
    with httpx.Client(timeout=TIMEOUT) as client:
        for i, messages in enumerate(requests):
            body = {
                "model": MODEL,
                "messages": messages,
                "max_tokens": RESERVES[i % len(RESERVES)],
                "temperature": 0,
            }
            r = client.post(url + "/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            timings = r.json()["timings"]
            dropped = actions(r).get("trim", 0)
            seen.append((dropped, int(r.headers["x-shrink-budget"]), *_n(timings)))
    dropped = [s[0] for s in seen]
    budgets = {s[1] for s in seen}
    assert dropped[0] > 0 and len(budgets) > 3 and max(budgets) < N_CTX, seen
    # The cut only ever moves forward...
    assert all(b >= a for a, b in zip(dropped, dropped[1:], strict=False)), seen
    # ... and a turn whose cut held re-reads only what is new: llama.cpp reused the whole
    # previous prompt (its last few tokens are the assistant header, answered differently).
    held = [
        (before, now) for before, now in zip(seen, seen[1:], strict=False) if before[0] == now[0]
    ]
    assert len(held) >= TURNS // 2, seen
    for before, now in held:
        assert now[3] >= before[2] + before[3] - 8, (before, now)
    # The same request again with a smaller reserve (so a larger budget, whose replay alone
    # would keep more history): the same prompt, all of it reused.
    sent = [c.json()["messages"] for c in tap.chats()]
    body = {"model": MODEL, "messages": requests[-1], "max_tokens": 4, "temperature": 0}
    with httpx.Client(timeout=TIMEOUT) as client:
        r = client.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert tap.chats()[-1].json()["messages"] == sent[-1]
    evaluated, reused = _n(r.json()["timings"])
    assert reused >= seen[-1][2] + seen[-1][3] - 8 and evaluated <= 8


def _n(timings: dict[str, Any]) -> tuple[int, int]:
    return int(timings["prompt_n"]), int(timings["cache_n"])
