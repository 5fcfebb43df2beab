"""Units: the smallest runs of chat messages that history trimming may drop or keep as a whole.

A backend rejects a `tool` message whose call it cannot see, and a call whose results are missing,
so an assistant message with `tool_calls` and the results that follow it are one unit. Everything
else is a unit of one message. Pure functions over plain dicts; junk never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.pipeline.types import Message

PINNED_ROLES = frozenset({"system", "developer"})
RESULT_ROLES = frozenset({"tool", "function"})


def role_of(message: Any) -> str | None:
    """The role of a message, or None for junk (non-dicts, missing or non-string roles)."""
    if isinstance(message, dict):
        role = message.get("role")
        if isinstance(role, str):
            return role
    return None


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


def pinned_count(messages: Sequence[Message]) -> int:
    """How many leading system/developer messages there are: they are always kept verbatim."""
    n = 0
    for message in messages:
        if role_of(message) not in PINNED_ROLES:
            break
        n += 1
    return n


def group_units(messages: Sequence[Message], start: int = 0) -> list[tuple[int, int]]:
    """Split messages[start:] into half-open (begin, end) spans that a cut may never split.

    An assistant message with tool calls owns the results that follow it and answer its ids, in
    any order. A result that answers nothing in the preceding unit is an orphan already; it joins
    that unit anyway so a cut cannot separate it any further. Both rules come to the same thing:
    every result joins a unit that an assistant message starts, so the spans do not depend on ids
    at all, and junk ids cannot break them. A result after anything else (a user message,
    another orphan) stands alone: a run of a thousand orphans is no unit too big to cut.
    """
    units: list[tuple[int, int]] = []
    for i in range(max(start, 0), len(messages)):
        if units and is_result(messages[i]) and role_of(messages[units[-1][0]]) == "assistant":
            begin, _ = units[-1]
            units[-1] = (begin, i + 1)
        else:
            units.append((i, i + 1))
    return units
