"""The official MCP SDK's client against shrink-proxy's MCP server: over stdio (a real
`python -m proxy mcp` subprocess) or Streamable HTTP (the proxy's `/mcp`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.shared_dir import ROOT, TIKTOKEN_CACHE

TOOLS = {
    *("run_compact_command", "read_output"),
    *("estimate_context", "trim_context", "compact_context"),
}


@contextlib.asynccontextmanager
async def stdio_session(
    workspace: Path, env: dict[str, str] | None = None, errlog: Any = None, args: tuple = ()
) -> AsyncIterator[ClientSession]:
    """A session with `python -m proxy mcp` run in `workspace` (also its workspace root)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "proxy", "mcp", *args],
        env={
            "PYTHONPATH": str(ROOT),
            "TIKTOKEN_CACHE_DIR": str(TIKTOKEN_CACHE),
            "SHRINK_MCP_WORKSPACE": str(workspace),
            **(env or {}),
        },
        cwd=workspace,  # no stray .env from the developer's folder
    )
    async with stdio_client(params, errlog=errlog or sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@contextlib.asynccontextmanager
async def http_session(url: str, key: str | None = None) -> AsyncIterator[ClientSession]:
    """A session with the proxy's `/mcp` at `url` (the proxy's base URL)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as client:
        async with streamable_http_client(url + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The tool's text block and structured content."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    return text, dict(result.structured_content or {})


def conversation(turns: int = 30, words: int = 400) -> list[dict[str, Any]]:
    """A system prompt and `turns` long alternating user/assistant turns, one tool call pair."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"turn {i}: " + "word " * words})
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "sh", "arguments": '{"cmd": "pytest"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "FAILED tests/test_a.py::test_x"},
        {"role": "user", "content": "fix it"},
    ]
    return messages
