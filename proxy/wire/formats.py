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
from proxy.wire import parse_chat
from proxy.wire.anthropic import parse_messages, system_text


@dataclass(frozen=True)
class WireFormat:
    name: str  # "chat", "anthropic": in logs, metrics and the planner process's arguments
    dialect: Dialect
    parse: Callable[[bytes], dict[str, Any]]
    shaped: bool  # whether messages are counted by the dialect (else by the chat counter)
    system_field: bool  # instructions held outside the messages, in `system`

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
ANTHROPIC_WIRE = WireFormat("anthropic", ANTHROPIC, parse_messages, shaped=True, system_field=True)
FORMATS = {f.name: f for f in (CHAT_WIRE, ANTHROPIC_WIRE)}
