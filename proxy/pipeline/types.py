"""Shared vocabulary of the pure pipeline: the counter protocol, the policy, the stage results.

Nothing here does I/O or reads settings; the edge builds a `Policy` from `Settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
Mode = Literal["auto", "off", "tools", "trim", "compact"]


class Counter(Protocol):
    """What the pipeline needs from a tokenizer (see proxy.tokens for the real one)."""

    @property
    def exact(self) -> bool:
        """False when counts are a byte-based estimate rather than a real encoding."""
        ...

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one chat message including its per-message overhead."""
        ...


@dataclass(frozen=True)
class Policy:
    """How hard to shrink. Built once from Settings at the edge; never depends on a request."""

    tool_max_tokens: int = 1024
    # A tool result may also take at most window / tool_window_share tokens: on small windows
    # history then grows slowly enough that stage 2's cut rarely moves (bench/prefix.py: at 8k,
    # cache-breaking turns 5.9% -> 1.6%). The window, not the budget, so a client varying
    # max_tokens between turns does not change how results are cut.
    tool_window_share: int = 20
    keep_last: int = 4
    # When the cut must move, it moves deep enough to leave trim_step of the budget free for
    # the turns to come: the larger, the rarer (and deeper) a move. Also the step of the
    # fallback grid of cut points (stage 2, proxy.pipeline.trim).
    trim_step: float = 0.8
    # ... but it keeps at least trim_keep_tokens of the request (at most half the budget). A
    # share of the budget scales with the window, and so do the tool results (a twentieth of
    # it): on any window a move keeps about three capped results. What does not scale is the
    # rest of a turn (the system prompt, the user's words, the marker and its facts): at 4k the
    # step alone kept ~560 tokens of 2,781, little beyond the system prompt. 1,024 binds only
    # where the room is under 5,120 tokens: below 8k (at 8k 0.2 of it is ~1,100, unless tool
    # definitions take about 800 tokens or more), so 8k and 16k cut where they did
    # (bench/README.md, prefix, small windows).
    trim_keep_tokens: int = 1024
    marker_role: Literal["system", "user"] = "system"
    mode: Mode = "auto"
    # Room stage 2 leaves for the summary that replaces its marker in compact mode.
    summary_tokens: int = 0
    # Room for the key facts of the dropped span (errors, outcomes, commands...) listed under the
    # trim marker, so dropped history still leaves its essentials behind; 0 turns it off.
    facts_tokens: int = 400
    # ... and at most window / facts_window_share (0: no cap). The list is weighed with the cut
    # that makes it and stays as long as the cut, so what it takes the kept history cannot
    # grow into: at 8k, 100 tokens of facts keep dev breaks at 3/188, 150 cost a 4th
    # (bench/README.md, prefix).
    facts_window_share: int = 80
    # When the latest user message alone cannot fit, stage 3 cuts its middle too (with the
    # usual marker) rather than leave the request to be refused; False: it arrives verbatim or
    # not at all.
    cut_latest_user: bool = True
    # ... but never less than facts_min_tokens (nor more than facts_tokens): a share of 4k is
    # 51 tokens, one or two lines, too few to hold the version chosen at the first step and
    # the last test verdict. 100 is what 8k's share gives (102), so 8k and 16k are unchanged.
    facts_min_tokens: int = 100
    # Every elision names the content hash of its original (proxy.pipeline.refs), which the
    # edge keeps in a store: the model can read it back. Off: markers as they were.
    retrieve: bool = False

    def trim_target(self, budget: int) -> int:
        """The most tokens a moved cut keeps of a `budget`-token request (see trim_step)."""
        return max(budget - int(self.trim_step * budget), min(self.trim_keep_tokens, budget // 2))

    def tool_limit(self, window: int) -> int:
        """The most tokens stage 1 leaves a tool result with, in a `window`-token context."""
        return min(self.tool_max_tokens, max(64, window // self.tool_window_share))


@dataclass
class StageAction:
    """One thing a stage did, for the report: which message, what happened, tokens before/after."""

    stage: str
    index: int
    detail: str
    tokens_before: int
    tokens_after: int


@dataclass
class Report:
    """What the pipeline did to one request. Serialised as-is by /v1/shrink."""

    tokens_before: int = 0
    tokens_after: int = 0
    budget: int = 0
    window: int = 0
    estimate: bool = False
    fits: bool = True
    actions: dict[str, int] = field(default_factory=dict)
    details: list[StageAction] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, stage: str, n: int = 1) -> None:
        self.actions[stage] = self.actions.get(stage, 0) + n

    @property
    def actions_header(self) -> str:
        """`tools:3,trim:14`, or `none` when nothing changed."""
        return ",".join(f"{k}:{v}" for k, v in self.actions.items()) or "none"
