"""The MCP server's settings (`shrink-proxy mcp`, `/mcp`).

Declared apart to keep proxy/settings.py to one screenful of concepts; `Settings` inherits them,
so they are read with the rest, in the one place (`SHRINK_*`, the env file, CLI flags).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class McpSettings(BaseModel):
    # --- MCP server (`shrink-proxy mcp`, `/mcp`) ------------------------------------------------
    mcp_workspace: str | None = Field(
        None,
        description="Folder `run_compact_command` runs in; a `cwd` outside it (after `..` and "
        "symlinks are resolved) is refused. Unset: the folder the server was started in.",
    )
    mcp_shell: bool = Field(
        False,
        description="Run commands through `/bin/sh -c` (pipes, globs, `&&`). Off: the command "
        "is split like a shell would (shlex) and run as an argument list.",
    )
    mcp_http_exec: bool = Field(
        False,
        description="Offer `run_compact_command` on the proxy's `/mcp` endpoint too. Off by "
        "default: it is remote code execution for whoever reaches the port (and holds the key).",
    )
    mcp_timeout: float = Field(
        120.0, gt=0, description="Seconds a command may run when the call names no timeout."
    )
    mcp_max_timeout: float = Field(
        900.0, gt=0, description="Longest timeout a call may ask for; then the process group dies."
    )
    mcp_output_max_bytes: int = Field(
        8 * 1024 * 1024,
        ge=4096,
        description="Bytes of one command's output held in memory: its head and tail, half each; "
        "the middle beyond is counted (`omitted_bytes`), not kept.",
    )
    mcp_store_outputs: int = Field(
        32, ge=1, description="Command outputs kept for `read_output` (oldest go first)."
    )
    mcp_store_mb: float = Field(
        64.0,
        gt=0,
        description="Megabytes of command output kept for `read_output` in all, as it takes "
        "memory (1 to 4 bytes a character).",
    )
    mcp_store_ttl: float = Field(
        3600.0, gt=0, description="Seconds an output stays readable with `read_output`."
    )
    mcp_page_lines: int = Field(
        2000, ge=1, description="Most lines one `read_output` page returns."
    )
    mcp_page_bytes: int = Field(
        50_000, ge=1024, description="Most bytes (UTF-8) one `read_output` page returns."
    )
