"""The wire formats the engine plans, each a parser, a dialect and what it counts as fixed.

A route names its format; the edge (proxy.shrinker, proxy.planner) plans any of them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.pipeline.anthropic import ANTHROPIC, TOKENS_PER_MESSAGE
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.tokens import ShapedCounter, TokenCounter
from proxy.wire import parse_chat, requested_completion_tokens
from proxy.wire.anthropic import parse_messages, system_text


@dataclass(frozen=True)
class WireFormat:
    name: str  # "chat", "anthropic": in logs, metrics and the planner process's arguments
    dialect: Dialect
    parse: Callable[[bytes], dict[str, Any]]
    shaped: bool  # whether messages are counted by the dialect (else by the chat counter)
    system_field: bool  # instructions held outside the messages, in `system`
    # The Messages API requires `max_tokens`, and clients set it as a ceiling, not a forecast
    # (Claude Code sends 32,000): taken whole, it would leave a 32k window's prompt the floor.
    # A backend that runs out of window mid-answer stops there, so the reserve is capped.
    reserve_share: int = 0  # 0: the request's own cap whole; N: at most window / N

    def completion_tokens(self, body: dict[str, Any], window: int) -> int | None:
        """The completion reserve the request asks for, as this format takes it."""
        n = requested_completion_tokens(body)
        if n is None or not self.reserve_share:
            return n
        return min(n, max(window // self.reserve_share, 1))

    def counter(self, tokens: TokenCounter) -> Any:
        """The counter of this format's messages with `tokens`' encoding and cache."""
        return ShapedCounter(tokens, ANTHROPIC) if self.shaped else tokens

    def fixed_tokens(self, body: dict[str, Any], tokens: TokenCounter) -> int:
        """Tokens of what is sent whole beside the messages: tool definitions, `system`."""
        n = tokens.count_tools(body.get("tools"))
        if self.system_field and body.get("system"):
            n += TOKENS_PER_MESSAGE + tokens.count_text(system_text(body["system"]))
        return n


CHAT_WIRE = WireFormat("chat", CHAT, parse_chat, shaped=False, system_field=False)
ANTHROPIC_WIRE = WireFormat(
    "anthropic", ANTHROPIC, parse_messages, shaped=True, system_field=True, reserve_share=4
)
FORMATS = {f.name: f for f in (CHAT_WIRE, ANTHROPIC_WIRE)}
