"""The MCP tools, on the official SDK's `MCPServer`: one definition for stdio and for `/mcp`.

Boundary: tool schemas, their descriptions and the server's instructions (what an agent reads to
pick a tool), and each tool's wiring to the engine: `runner` runs, `output` compacts, `store`
keeps, `context` plans. Results carry a readable text block (what a model is shown: status,
exit code and duration first) and the same facts as structured content. Blocking work (stage 1
over a long output, planning a conversation) runs in a worker thread, so concurrent calls
proceed. Requires the `mcp` extra; nothing else in the proxy imports this module eagerly.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import anyio
import orjson
from mcp.server import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from proxy import __version__
from proxy.errors import ProxyError
from proxy.mcp import output, runner
from proxy.mcp.context import Context
from proxy.mcp.store import OutputGone, OutputStore
from proxy.pipeline import Plan
from proxy.pipeline.refs import REF_RE
from proxy.retrieval.keep import keep
from proxy.retrieval.pages import Output, Page, read_page
from proxy.retrieval.store import Gone, MemoryStore, Store
from proxy.settings import Settings
from proxy.wire.formats import FORMATS

INSTRUCTIONS = "shrink-proxy keeps your context small without losing what matters.\n"
COMMANDS = """
- To run a shell command whose output may be long (tests, builds, installs, linters, logs, \
git log, find/grep over a tree), call run_compact_command instead of your usual shell tool. It \
returns the status, exit code and duration first, then the output compacted: errors, \
warnings, test verdicts, tracebacks and the tail are kept; long runs of similar lines and \
progress bars are collapsed into markers such as "[... 412 lines (9,310 tokens) omitted by \
shrink-proxy ...]".
- When a marker hides something you need, call read_output with the output_ref it returned, \
a line range (start_line/end_line, 1-based) and/or grep (case-insensitive literal text, \
"a|b" for either). Nothing is lost until the ref expires.
"""
CONTEXT = """
- Before sending a long conversation to a model with a small window, call estimate_context \
(tokens per message, the budget, should_trim). If it does not fit, trim_context drops the \
oldest turns at a stable cut (system prompt, tool-call pairs and the last messages kept, the \
dropped turns' key lines listed under a marker); compact_context does the same and replaces \
the marker with a summary: pass your own `summary` of the dropped turns (ask for \
include_transcript to get them rendered), or leave it to the server's summarizer if one is \
configured. What a marker naming `Retrieve more: hash=<24 hex>` stands for is kept: \
read_output reads it back given that hash as output_ref.
"""


def instructions(allow_exec: bool) -> str:
    """What the agent reads before it picks a tool (commands only where they can be run)."""
    return INSTRUCTIONS + (COMMANDS if allow_exec else "") + CONTEXT


Messages = Annotated[
    list[dict[str, Any]],
    Field(description="Chat Completions messages: objects with role, content, tool_calls..."),
]
Model = Annotated[
    str | None,
    Field(description="Model name: picks the tokenizer and a configured window (optional)."),
]
Window = Annotated[
    int | None,
    Field(ge=512, description="Context window in tokens (default: the configured one)."),
]
Reserve = Annotated[
    int | None, Field(gt=0, description="Tokens to keep for the answer (its max_tokens).")
]
Wire = Annotated[
    Literal["chat", "anthropic"],
    Field(description="The messages' format: chat (Chat Completions) or anthropic (Messages)."),
]
System = Annotated[
    str | list[dict[str, Any]] | None,
    Field(description="anthropic only: the request's top-level system prompt."),
]
KeepLast = Annotated[
    int | None,
    Field(ge=0, le=1000, description="The last N messages are kept (default: configured)."),
]


@dataclass
class Engine:
    """What the tools call: the store of outputs and the planner over message lists, with the
    settings (`SHRINK_MCP_*`) and the workspace root they were resolved to."""

    settings: Settings
    store: OutputStore
    context: Context
    workspace: str = ""
    # The originals behind the hashes in the markers trim_context and compact_context write
    # (the proxy's own store on /mcp: a hash from a proxied request reads back here too).
    refs: Store = field(default_factory=MemoryStore)

    def __post_init__(self) -> None:
        self.workspace = os.path.realpath(self.settings.mcp_workspace or os.getcwd())

    def count(self) -> Callable[[str], int]:
        return self.context.tokenizers.for_model(None).count_text


def build_store(settings: Settings) -> OutputStore:
    return OutputStore(
        settings.mcp_store_outputs, int(settings.mcp_store_mb * 1_000_000), settings.mcp_store_ttl
    )


def build_server(engine_of: Callable[[], Engine], allow_exec: bool) -> MCPServer:
    """The MCP server; `engine_of()` gives the engine at call time (the proxy builds its
    engine in the app's lifespan, after the server is mounted)."""
    server: MCPServer = MCPServer(
        "shrink-proxy",
        instructions=instructions(allow_exec),
        version=__version__,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    if allow_exec:

        @server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=True))
        async def run_compact_command(
            command: Annotated[
                str | list[str],
                Field(
                    description="The command: an argument list, or a command line split as a "
                    "POSIX shell would (no pipes or redirections unless the server runs a shell)."
                ),
            ],
            cwd: Annotated[
                str | None,
                Field(description="Folder to run in, relative to the workspace root (default)."),
            ] = None,
            timeout_s: Annotated[
                float | None,
                Field(gt=0, description="Seconds before the command and its children die."),
            ] = None,
            max_tokens: Annotated[
                int | None,
                Field(ge=64, description="Token cap for the output shown (default: configured)."),
            ] = None,
        ) -> CallToolResult:
            """Run a command in the workspace and return its status, exit code and duration,
            then its output (stdout and stderr together) compacted to max_tokens, and an
            output_ref for read_output. Use it for any command whose output may be long."""
            return await _run(engine_of(), command, cwd, timeout_s, max_tokens)

    @server.tool(annotations=read_only)
    async def read_output(
        output_ref: Annotated[
            str,
            Field(
                description="The output_ref run_compact_command gave, or the hash a "
                "`Retrieve more: hash=` marker names."
            ),
        ],
        start_line: Annotated[int, Field(ge=1, description="First line to return (1-based).")] = 1,
        end_line: Annotated[int | None, Field(ge=1, description="Last line (inclusive).")] = None,
        grep: Annotated[
            str | None,
            Field(description="Only lines holding this text (case-insensitive; a|b: either)."),
        ] = None,
    ) -> CallToolResult:
        """Read a command's full output back, a bounded page at a time: a line range, or the
        lines matching grep (numbered). Use it for what a marker in the compacted view hid."""
        engine = engine_of()
        s = engine.settings
        bounds = {"max_lines": s.mcp_page_lines, "max_bytes": s.mcp_page_bytes}
        page: Page
        try:
            if REF_RE.fullmatch(f"hash={output_ref.strip().lower()}"):
                ref = output_ref.strip().lower()  # a `Retrieve more: hash=` marker's
                text = await engine.refs.get(ref)
                page = await anyio.to_thread.run_sync(
                    lambda: read_page(
                        Output(ref, "", text, 0.0), start_line, end_line, grep, **bounds
                    )
                )
            else:
                page = await anyio.to_thread.run_sync(
                    lambda: engine.store.read(output_ref, start_line, end_line, grep, **bounds)
                )
        except (OutputGone, Gone) as exc:
            return _error(str(exc), {"status": "expired", "output_ref": output_ref})
        data = page.as_dict()
        head = f"lines {page.start_line}-{page.end_line} of {page.total_lines}"
        if page.matches is not None:
            head += f", {page.matches} matching {grep!r}"
        if page.truncated_by:
            head += f"; page cut by its {page.truncated_by} cap"
        if page.next_start_line:
            head += f"; more from start_line={page.next_start_line}"
        return _result(f"[{head}]\n{page.text}", data)

    @server.tool(annotations=read_only)
    async def estimate_context(
        messages: Messages,
        model: Model = None,
        context_window: Window = None,
        max_tokens: Reserve = None,
        tools: Annotated[
            list[dict[str, Any]] | None, Field(description="Tool definitions sent along.")
        ] = None,
        wire: Wire = "chat",
        system: System = None,
    ) -> CallToolResult:
        """Count a conversation's tokens (per message and in total) against the budget the
        proxy would plan for: whether it fits, should_trim, and the tokenizer used."""
        ctx = engine_of().context
        args = (messages, model, context_window, max_tokens, tools, wire, system)
        return await _planned(ctx.estimate, *args)

    @server.tool(annotations=read_only)
    async def trim_context(
        messages: Messages,
        model: Model = None,
        context_window: Window = None,
        max_tokens: Reserve = None,
        keep_last: KeepLast = None,
        wire: Wire = "chat",
        system: System = None,
    ) -> CallToolResult:
        """Shrink a conversation to fit: oversized tool results compacted, then the oldest
        turns dropped at a stable cut, their key lines listed under a marker. Returns the
        messages to send and the report."""
        engine = engine_of()
        ctx = engine.context
        args = (messages, model, context_window, max_tokens, keep_last, wire, system)
        plans: list[Plan] = []

        def trim() -> dict[str, Any]:
            plans.append(ctx.plan("trim", *args))
            return ctx.result(plans[0], model)

        result = await _planned(trim)
        if plans:
            await keep(engine.refs, plans[0], FORMATS[wire].dialect)
        return result

    @server.tool(annotations=read_only)
    async def compact_context(
        messages: Messages,
        model: Model = None,
        context_window: Window = None,
        max_tokens: Reserve = None,
        keep_last: KeepLast = None,
        summary: Annotated[
            str | None, Field(description="Your summary of the dropped turns, to insert.")
        ] = None,
        include_transcript: Annotated[
            bool, Field(description="Without a summary: return the dropped turns rendered.")
        ] = False,
        wire: Wire = "chat",
        system: System = None,
    ) -> CallToolResult:
        """As trim_context, with the dropped turns replaced by a summary: the one you pass, or
        the configured summarizer's, or none (plan only: the marker and its key lines stay)."""
        engine = engine_of()
        ctx = engine.context
        args = (messages, model, context_window, max_tokens, keep_last, wire, system)
        try:
            plan = await anyio.to_thread.run_sync(lambda: ctx.plan("compact", *args))
        except ProxyError as exc:
            return _error(exc.message, {"status": "invalid"})
        await keep(engine.refs, plan, FORMATS[wire].dialect)
        data = await ctx.summarize(plan, model, summary, include_transcript, wire)
        return _result(orjson.dumps(data).decode(), data)

    return server


async def _run(
    engine: Engine,
    command: str | list[str],
    cwd: str | None,
    timeout_s: float | None,
    max_tokens: int | None,
) -> CallToolResult:
    s = engine.settings
    shown = command if isinstance(command, str) else shlex.join(command)
    try:
        argv = runner.argv_of(command, s.mcp_shell)
        where = runner.resolve_cwd(engine.workspace, cwd)
    except runner.Refused as exc:
        return _error(f"refused: {exc}", {"status": "refused", "exit_code": None})
    timeout = min(timeout_s if timeout_s and timeout_s > 0 else s.mcp_timeout, s.mcp_max_timeout)
    cap = max(64, max_tokens or s.tool_max_tokens)
    began = time.monotonic()
    done = await runner.run(argv, where, timeout, s.mcp_output_max_bytes)
    kept, binary = output.decode(done)
    seconds = s.work_budget + s.work_budget_per_mb * len(kept) / 1e6
    count = engine.count()
    view = await anyio.to_thread.run_sync(lambda: output.compact(kept, cap, count, seconds, binary))
    ref = engine.store.put(shown, kept) if kept else None
    data: dict[str, Any] = {
        "status": done.status,
        "exit_code": done.exit_code,
        "duration_s": round(done.duration, 3),
        "error": done.error,
        "tokens_before": view.tokens_before,
        "tokens_after": view.tokens_after,
        "output_ref": ref,
        "lines": view.lines,
        "bytes": done.total_bytes,
        "omitted_bytes": done.omitted_bytes,
        "binary": binary,
        "children_killed": done.killed_children,
        "counter": engine.context.counter_info(None),
        "overhead_s": round(time.monotonic() - began - done.duration, 4),
        "output": view.text,
    }
    text = _banner(data) + ("\n" + view.text if view.text else "")
    return _result(text, data, error=done.status == "error")


def _banner(d: dict[str, Any]) -> str:
    parts = [f"status: {d['status']}"]
    parts.append(f"exit code: {d['exit_code']}" if d["exit_code"] is not None else "no exit code")
    parts.append(f"{d['duration_s']:.2f} s")
    if d["error"]:
        parts.append(d["error"])
    head = " | ".join(parts)
    size = f"{d['lines']:,} lines, {d['bytes']:,} bytes"
    if d["binary"]:
        size += " (binary: NUL bytes; undecodable bytes shown as U+FFFD)"
    if d["tokens_after"] < d["tokens_before"]:
        saved = d["tokens_before"] - d["tokens_after"]
        pct = 100 * saved / max(1, d["tokens_before"])
        size += (
            f"; shrink-proxy compacted {d['tokens_before']:,} -> {d['tokens_after']:,} tokens "
            f"(-{pct:.0f}%)"
        )
        if d["output_ref"]:
            size += f": read_output(output_ref={d['output_ref']!r}) pages the full text"
        else:
            size += ": too large to keep for read_output (SHRINK_MCP_STORE_MB)"
    elif d["output_ref"]:
        size += f"; output_ref {d['output_ref']}"
    if d["omitted_bytes"]:
        size += f"; {d['omitted_bytes']:,} bytes from its middle were not kept"
    return f"[{head}]\n[{size}]"


async def _planned(fn: Callable[..., dict[str, Any]], *args: Any) -> CallToolResult:
    try:
        data = await anyio.to_thread.run_sync(lambda: fn(*args))
    except ProxyError as exc:  # the edge's own validation: say what is wrong, as a tool error
        return _error(exc.message, {"status": "invalid"})
    return _result(orjson.dumps(data).decode(), data)


def _result(text: str, data: dict[str, Any], error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=data, is_error=error
    )


def _error(message: str, data: dict[str, Any]) -> CallToolResult:
    return _result(message, data | {"error": message}, error=True)
