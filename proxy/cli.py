"""Command line: argv -> Settings -> uvicorn. Subcommands; no other logic lives here."""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy import __version__
from proxy.settings import Settings, export_settings, load_settings, settings_table
from proxy.upstream import loggable_url

log = logging.getLogger("proxy")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shrink-proxy",
        description="OpenAI-compatible reverse proxy that shrinks prompts in flight. Point any "
        "client's base_url at http://HOST:PORT/v1. Every flag also has an env variable "
        "(SHRINK_<NAME>); flags win over env, env wins over the env file.",
    )
    parser.add_argument("--version", action="version", version=f"shrink-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the proxy", description="Run the proxy server.")
    add_common(serve)
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--log-format", choices=["auto", "json", "text"])

    shrink = sub.add_parser(
        "shrink",
        help="shrink a saved chat or Anthropic Messages request offline",
        description="Shrink a saved request (JSON with `messages`: Chat Completions, or "
        "Anthropic Messages with --api anthropic) as the proxy would, without calling any "
        "upstream. The shrunk request goes to stdout, a readable "
        "report to stderr. Exit status 3 when it cannot be made to fit.",
    )
    shrink.add_argument("file", help="request JSON file, or - for stdin")
    add_common(shrink)
    shrink.add_argument("--model", help="override the request's model (picks window/tokenizer)")
    shrink.add_argument("--max-tokens", type=int, help="completion reserve for this request")
    shrink.add_argument("--json-report", action="store_true", help="report as JSON on stderr")
    shrink.add_argument(
        "--api",
        choices=("chat", "anthropic", "responses"),
        default="chat",
        help="the request's wire format: chat (/v1/chat/completions), anthropic (/v1/messages) "
        "or responses (/v1/responses)",
    )

    mcp = sub.add_parser(
        "mcp",
        help="run the MCP server on stdio (needs the mcp extra)",
        description="Serve the MCP tools (run_compact_command, read_output, estimate_context, "
        "trim_context, compact_context) on stdin/stdout, for an agent that launches its tool "
        "servers. Logs go to stderr. Commands run inside SHRINK_MCP_WORKSPACE (default: here).",
    )
    add_common(mcp)
    mcp.add_argument("--workspace", dest="mcp_workspace", help="folder commands may run in")
    mcp.add_argument("--log-level", help="debug, info, warning, error (default warning)")

    st = sub.add_parser(
        "stats",
        help="print what a running proxy saved",
        description="Fetch /stats from a running proxy and print totals, savings by model and "
        "by stage, and the last requests.",
    )
    st.add_argument(
        "--url",
        default="http://127.0.0.1:8080",
        help="the proxy's address (a client's base_url ending in /v1 works too)",
    )
    st.add_argument("--key", help="the proxy's inbound key (SHRINK_PROXY_API_KEY), if one is set")

    table = sub.add_parser("settings-table", help="print the settings table (markdown)")
    table.add_argument("--update", metavar="README", help="rewrite the table inside this file")
    return parser


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-file", help="read SHRINK_* settings from this file (e.g. config/ollama.env)"
    )
    p.add_argument("--upstream", dest="upstream_url", help="upstream base URL including /v1")
    p.add_argument("--context-window", type=int, help="context window in tokens (default 32768)")
    p.add_argument(
        "--mode", choices=["auto", "off", "tools", "trim", "compact"], help="default shrink mode"
    )
    p.add_argument("--tool-max-tokens", type=int, help="compact tool results above this size")
    p.add_argument("--keep-last", type=int, help="never trim the last N messages")
    p.add_argument("--tokenizer", help="force a tiktoken encoding (cl100k_base, o200k_base)")


OVERRIDES = (
    "tokenizer",
    "upstream_url",
    "context_window",
    "mode",
    "tool_max_tokens",
    "keep_last",
    "host",
    "port",
    "workers",
    "log_level",
    "log_format",
    "mcp_workspace",
)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {k: getattr(args, k, None) for k in OVERRIDES}
    return load_settings(getattr(args, "env_file", None), **overrides)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        return 130


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "stats":
        from proxy.stats import main_stats

        return main_stats(args.url, args.key)
    if args.command == "settings-table":
        return update_table(args.update) if args.update else print(settings_table()) or 0
    try:
        settings = settings_from(args)
    except (ValidationError, FileNotFoundError) as exc:
        print(f"shrink-proxy: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings)
    if args.command == "shrink":
        return shrink_file(settings, args)
    if args.command == "mcp":
        return serve_mcp(settings, args.log_level)
    parser.error(f"unknown command {args.command}")
    return 2


def update_table(path: str) -> int:
    import re

    with open(path, encoding="utf-8") as f:
        text = f.read()
    new, n = re.subn(
        r"(<!-- settings-table:start -->\n).*?(\n<!-- settings-table:end -->)",
        lambda m: m.group(1) + settings_table() + m.group(2),
        text,
        flags=re.S,
    )
    if n != 1:
        print(f"shrink-proxy: no settings-table markers in {path}", file=sys.stderr)
        return 2
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


def shrink_file(settings: Settings, args: argparse.Namespace) -> int:
    import dataclasses

    import orjson

    from proxy.apis import APIS
    from proxy.app import build_tokenizers
    from proxy.errors import ProxyError
    from proxy.shrinker import Shrinker, parse_mode

    logging.basicConfig(level=logging.WARNING, format="shrink-proxy: %(message)s")
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        print(f"shrink-proxy: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    api = APIS[args.api]
    raw = api.prepare(raw, settings)
    try:
        body = api.fmt.parse(raw)
    except ProxyError as exc:
        print(f"shrink-proxy: {args.file}: {exc.message}", file=sys.stderr)
        return 2
    if args.model:
        body["model"] = args.model
    if args.max_tokens:
        body["max_tokens"] = args.max_tokens
    plan = Shrinker(settings, build_tokenizers(settings)).plan_sync(
        body, parse_mode(None, settings), fmt=api.fmt
    )
    out = api.fmt.dump_with(body, plan.messages) if plan.changed else raw
    sys.stdout.buffer.write(out.rstrip(b"\n") + b"\n")
    r = plan.report
    if args.json_report:
        print(orjson.dumps(dataclasses.asdict(r)).decode(), file=sys.stderr)
    else:
        saved = r.tokens_before - r.tokens_after
        pct = 100 * saved / r.tokens_before if r.tokens_before else 0
        print(
            f"tokens: {r.tokens_before:,} -> {r.tokens_after:,} (saved {saved:,}, {pct:.0f}%); "
            f"budget {r.budget:,} of window {r.window:,}; fits: {'yes' if r.fits else 'NO'}"
            + ("; counts are a bytes/4 ESTIMATE" if r.estimate else ""),
            file=sys.stderr,
        )
        print(f"actions: {r.actions_header}", file=sys.stderr)
        for d in r.details:
            print(
                f"  {d.stage:<9} message {d.index:>4}: {d.detail} "
                f"({d.tokens_before:,} -> {d.tokens_after:,} tokens)",
                file=sys.stderr,
            )
        for note in r.notes:
            print(f"  note: {note}", file=sys.stderr)
    return 0 if r.fits else 3


def serve_mcp(settings: Settings, log_level: str | None) -> int:
    import anyio

    from proxy import logs
    from proxy.mcp.stdio import MISSING

    if importlib.util.find_spec("mcp") is None:
        print(f"shrink-proxy: {MISSING}", file=sys.stderr)
        return 2
    from proxy.mcp.stdio import serve as serve_stdio

    # stderr only: stdout carries the protocol. Quieter than the proxy unless asked.
    logs.configure(log_level or "warning", settings.log_format)
    anyio.run(serve_stdio, settings)
    return 0


def is_public(host: str) -> bool:
    if host in ("localhost", ""):
        return host == ""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def serve(settings: Settings) -> int:
    import uvicorn

    from proxy import logs
    from proxy.app import create_app, settle_heap

    logs.configure(settings.log_level, settings.log_format)
    if settings.store_url and importlib.util.find_spec("redis") is None:
        from proxy.redis_link import MISSING

        print(f"shrink-proxy: {MISSING}", file=sys.stderr)
        return 2
    log.info(
        "shrink-proxy %s listening on http://%s:%d/v1 -> upstream %s",
        __version__,
        settings.host,
        settings.port,
        loggable_url(settings.upstream_url),
    )
    if is_public(settings.host):
        if settings.proxy_api_key is None:
            log.warning(
                "!!! binding %s WITHOUT an inbound key: anyone who can reach this port can use "
                "your upstream (and its key). Set SHRINK_PROXY_API_KEY or bind 127.0.0.1. !!!",
                settings.host,
            )
        else:
            log.info(
                "binding a public interface (%s); clients must present the inbound key",
                settings.host,
            )
    else:
        log.info("bound to %s only: reachable from this machine", settings.host)
    common: dict[str, Any] = dict(
        host=settings.host,
        port=settings.port,
        log_config=None,
        server_header=False,
        access_log=False,
        timeout_graceful_shutdown=settings.shutdown_grace,
    )
    # uvicorn drains in-flight requests on SIGTERM, then re-raises the signal with the previous
    # handler restored: make that handler a clean exit 0, as process supervisors expect.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if settings.workers > 1:
        # Workers are separate processes: each rebuilds the same Settings from the environment.
        export_settings(settings)
        uvicorn.run("proxy.app:create_worker_app", factory=True, workers=settings.workers, **common)
    else:
        app = create_app(settings)
        settle_heap()
        uvicorn.run(app, **common)
    return 0
