"""Work budgets: defence in depth against a text whose rules cost more than they should.

Every text rule runs in linear time by construction (tests/test_patterns_linear.py), and huge
texts are digested first; still, a rule added tomorrow could be slow on some output nobody has
seen. The edge may give stage 1 a budget per text, which it checks between its phases: when one
is spent, that text alone falls back to the plain head+tail cut with its marker, the request
goes on, and the report says so (`work_budget` in its actions). The pipeline never reads a
clock itself: the budget is the edge's object, called at checkpoints. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class WorkExceeded(Exception):
    """A text's rules spent their budget (raised by a checkpoint)."""


class Work(Protocol):
    def check(self) -> None:
        """Raise WorkExceeded once the budget is spent."""
        ...


# chars of a text -> a budget for reading it
Budgeter = Callable[[int], Work]


def check(work: Work | None) -> None:
    if work is not None:
        work.check()
