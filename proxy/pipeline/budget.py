"""The prompt budget: what part of the window the prompt may use.

budget = window - completion reserve - safety margin. The reserve is the request's own
`max_completion_tokens`/`max_tokens` when present, else a default capped at a quarter of the
window. When the request's reserve leaves less than the floor, the budget is clamped to the floor
(and that is reported) rather than refusing the request outright.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    window: int
    reserve: int
    margin: int
    prompt: int  # tokens the whole prompt (messages, tools, priming) may take
    clamped: bool  # the completion reserve left less than the floor

    def describe(self) -> str:
        return (
            f"window {self.window:,} - reserve {self.reserve:,} - margin {self.margin:,}"
            f" = {self.prompt:,} tokens for the prompt"
            + (
                " (clamped to the floor: the requested completion size leaves less)"
                if self.clamped
                else ""
            )
        )


def compute_budget(
    window: int,
    requested_completion: int | None,
    *,
    default_reserve: int,
    floor: int,
    margin_share: float,
) -> Budget:
    margin = math.ceil(window * margin_share)
    if requested_completion is not None:
        reserve = requested_completion
    else:
        reserve = min(default_reserve, window // 4)
    prompt = window - reserve - margin
    ceiling = max(1, window - margin)
    clamped = prompt < floor
    if clamped:
        prompt = min(floor, ceiling)
    return Budget(window=window, reserve=reserve, margin=margin, prompt=prompt, clamped=clamped)
