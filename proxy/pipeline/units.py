"""Units: the smallest runs of messages that history trimming may drop or keep as a whole.

A backend rejects a tool result whose call it cannot see, and a call whose results are missing,
so an assistant message with tool calls and the results that follow it are one unit. Everything
else is a unit of one message. What a call and a result look like is the dialect's business
(`proxy.pipeline.dialect`); Chat Completions is the default. Pure functions; junk never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.pipeline.dialect import CHAT, PINNED_ROLES, RESULT_ROLES, Dialect, role_of
from proxy.pipeline.types import Message

__all__ = [
    "PINNED_ROLES",
    "RESULT_ROLES",
    "call_ids",
    "group_units",
    "is_result",
    "pinned_count",
    "role_of",
]


def is_result(message: Any) -> bool:
    """A tool result (`tool`) or a legacy function result (`function`)."""
    return role_of(message) in RESULT_ROLES


def call_ids(message: Any) -> set[str]:
    """The ids of an assistant message's tool calls (junk entries and missing ids are skipped)."""
    if role_of(message) != "assistant":
        return set()
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return set()
    return {c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)}


def pinned_count(messages: Sequence[Message], dialect: Dialect = CHAT) -> int:
    """How many leading pinned (system/developer) messages there are: always kept verbatim."""
    n = 0
    for message in messages:
        if not dialect.is_pinned(message):
            break
        n += 1
    return n


def group_units(
    messages: Sequence[Message], start: int = 0, dialect: Dialect = CHAT
) -> list[tuple[int, int]]:
    """Split messages[start:] into half-open (begin, end) spans that a cut may never split
    (`proxy.pipeline.dialect.group_by_results` for the rule)."""
    return dialect.group_units(messages, start)
