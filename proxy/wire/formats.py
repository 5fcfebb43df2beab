"""The wire formats the engine plans, each a parser, a dialect and what it counts as fixed.

A route names its format; the edge (proxy.shrinker, proxy.planner) plans any of them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

from proxy.pipeline.anthropic import ANTHROPIC, TOKENS_PER_MESSAGE
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.responses import RESPONSES
from proxy.pipeline.types import Mode
from proxy.retrieval.tool import CHAT_TOOL, MESSAGES_TOOL, RESPONSES_TOOL
from proxy.retrieval.tool import NAME as RETRIEVAL_NAME
from proxy.tokens import ShapedCount, ShapedCounter, TokenCounter
from proxy.wire import parse_chat, requested_completion_tokens
from proxy.wire.anthropic import parse_messages, system_text
from proxy.wire.responses import parse_responses, retrieval_offered, server_history


@dataclass(frozen=True)
class WireFormat:
    name: str  # "chat", "anthropic", "responses": logs, metrics, the planner process's arguments
    dialect: Dialect
    parse: Callable[[bytes], dict[str, Any]]
    shaped: bool  # whether messages are counted by the dialect (else by the chat counter)
    system_field: str | None  # instructions held outside the messages (`system`), if any
    # The Messages API requires `max_tokens`, and clients set it as a ceiling, not a forecast
    # (Claude Code sends 32,000): taken whole, it would leave a 32k window's prompt the floor.
    # A backend that runs out of window mid-answer stops there, so the reserve is capped.
    reserve_share: int = 0  # 0: the request's own cap whole; N: at most window / N
    field: str = "messages"  # where the body keeps the list the engine plans
    reserve_keys: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
    # Whether a request continues history held by the server, which the proxy does not see.
    held: Callable[[dict[str, Any]], bool] | None = None
    # The tool the proxy answers in flight (proxy.retrieval), in this format's shape: added to
    # a request that carries tools and whose shrunk messages name a ref. None: not offered.
    retrieval_tool: dict[str, Any] | None = None
    # Whether a request of this format may have the tool at all (None: any that has tools).
    retrieval_offered: Callable[[dict[str, Any]], bool] | None = None

    def plan_mode(self, body: dict[str, Any], mode: Mode) -> tuple[Mode, bool]:
        """(the mode to plan `body` in, whether its history is held upstream): a request whose
        history the server holds can only have its own tool outputs compacted."""
        if self.held is None or mode == "off" or not self.held(body):
            return mode, False
        return "tools", True

    def conversation(self, body: dict[str, Any]) -> Any:
        """The list the engine plans (the parser checked it is one)."""
        return body[self.field]

    def dump_with(self, body: dict[str, Any], items: list[Any]) -> bytes:
        """Re-serialise the request with a new list, keeping every other field and its order."""
        return orjson.dumps({**body, self.field: items})

    def completion_tokens(self, body: dict[str, Any], window: int) -> int | None:
        """The completion reserve the request asks for, as this format takes it."""
        n = requested_completion_tokens(body, self.reserve_keys)
        if n is None or not self.reserve_share:
            return n
        return min(n, max(window // self.reserve_share, 1))

    def counter(self, tokens: TokenCounter) -> Any:
        """The counter of this format's messages with `tokens`' encoding and cache."""
        return ShapedCounter(tokens, cast(ShapedCount, self.dialect)) if self.shaped else tokens

    def tool_room(self, body: dict[str, Any], tokens: TokenCounter) -> int:
        """Tokens the retrieval tool would add to `body`: 0 when it is not offered there (no
        tool of the client's: not an agent; a format without one; one whose
        `retrieval_offered` refuses the request; or tools that already hold one of its name, as
        a proxy in front of this one adds: a second would be refused as a duplicate, and the
        calls are that proxy's to answer). Decided from the body alone, so that the plan is the
        same whether the client turns the tool off or not."""
        tools = body.get("tools")
        if self.retrieval_tool is None or not isinstance(tools, list) or not tools:
            return 0  # a junk `tools` is the backend's to refuse, as sent
        if self.retrieval_offered is not None and not self.retrieval_offered(body):
            return 0
        if any(tool_name(t) == RETRIEVAL_NAME for t in tools):
            return 0
        return tokens.count_tools([self.retrieval_tool])

    def with_retrieval_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the retrieval tool after the client's own (which stay as sent)."""
        assert self.retrieval_tool is not None
        return {**body, "tools": [*body["tools"], self.retrieval_tool]}

    def fixed_tokens(self, body: dict[str, Any], tokens: TokenCounter) -> int:
        """Tokens of what is sent whole beside the messages: tool definitions, `system`."""
        n = tokens.count_tools(body.get("tools"))
        if self.system_field and body.get(self.system_field):
            n += TOKENS_PER_MESSAGE + tokens.count_text(system_text(body[self.system_field]))
        return n


def tool_name(tool: Any) -> Any:
    """A tool definition's name in any of the three shapes (chat's under `function`)."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, dict) else tool.get("name")


CHAT_WIRE = WireFormat(
    "chat", CHAT, parse_chat, shaped=False, system_field=None, retrieval_tool=CHAT_TOOL
)
ANTHROPIC_WIRE = WireFormat(
    "anthropic",
    ANTHROPIC,
    parse_messages,
    shaped=True,
    system_field="system",
    reserve_share=4,
    retrieval_tool=MESSAGES_TOOL,
)
RESPONSES_WIRE = WireFormat(
    "responses",
    RESPONSES,
    parse_responses,
    shaped=True,
    system_field="instructions",
    field="input",
    reserve_keys=("max_output_tokens",),
    held=server_history,
    retrieval_tool=RESPONSES_TOOL,
    retrieval_offered=retrieval_offered,
)
FORMATS = {f.name: f for f in (CHAT_WIRE, ANTHROPIC_WIRE, RESPONSES_WIRE)}
