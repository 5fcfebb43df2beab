"""Where the pipeline runs: inline for small or already-seen requests, in a worker thread for
large new text (a cold 160 KB conversation takes tens of milliseconds, which inline would stall
every other connection on the event loop)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from proxy.settings import Settings
from proxy.shrinker import THREAD_THRESHOLD, Shrinker
from proxy.tokenizers import Tokenizers


def conversation(seed: str, tool_bytes: int) -> dict[str, Any]:
    line = f"{seed}: collecting package metadata ... done, resolving dependencies\n"
    return {
        "model": "qwen2.5-coder",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Install the project."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "run", "arguments": '{"cmd": "pip install ."}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": line * (tool_bytes // len(line))},
            {"role": "user", "content": f"What failed? ({seed})"},
        ],
    }


class Recording(Shrinker):
    def __init__(self) -> None:
        super().__init__(Settings(context_window=16384), Tokenizers())
        self.threads: list[bool] = []

    def plan_sync(self, body, mode, window=None):  # type: ignore[no-untyped-def]
        self.threads.append(threading.current_thread() is threading.main_thread())
        return super().plan_sync(body, mode, window)


def test_large_new_text_goes_to_a_thread_then_inline_once_seen() -> None:
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)

    async def run() -> None:
        for _ in range(2):
            plan = await shrinker.plan(body, 5 * THREAD_THRESHOLD, "trim")
            assert plan.report.actions.get("tools") == 1

    asyncio.run(run())
    assert shrinker.threads == [False, True]  # cold: worker thread; warm: inline


def test_a_new_turn_with_a_small_new_message_stays_inline() -> None:
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)
    later = {**body, "messages": [*body["messages"], {"role": "user", "content": "And now?"}]}

    async def run() -> None:
        await shrinker.plan(body, 5 * THREAD_THRESHOLD, "trim")
        await shrinker.plan(later, 5 * THREAD_THRESHOLD, "trim")
        other = conversation("b", 4 * THREAD_THRESHOLD)  # same size, new text: a thread again
        await shrinker.plan(other, 5 * THREAD_THRESHOLD, "trim")

    asyncio.run(run())
    assert shrinker.threads == [False, True, False]


def test_small_bodies_never_leave_the_event_loop() -> None:
    shrinker = Recording()
    body = conversation("a", 2048)
    asyncio.run(shrinker.plan(body, 3000, "trim"))
    assert shrinker.threads == [True]
