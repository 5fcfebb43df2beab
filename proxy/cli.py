"""Command line: argv -> Settings -> uvicorn. Subcommands; no other logic lives here."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from proxy import __version__
from proxy.settings import Settings, load_settings, settings_table

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

    sub.add_parser("settings-table", help="print the settings table (markdown) for the README")
    return parser


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-file", help="read SHRINK_* settings from this file (e.g. config/ollama.env)"
    )
    p.add_argument("--upstream", dest="upstream_url", help="upstream base URL including /v1")
    p.add_argument("--context-window", type=int, help="context window in tokens (default 32768)")
    p.add_argument("--mode", choices=["auto", "off", "tools", "trim"], help="default shrink mode")
    p.add_argument("--tool-max-tokens", type=int, help="compact tool results above this size")
    p.add_argument("--keep-last", type=int, help="never trim the last N messages")


OVERRIDES = (
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
)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {k: getattr(args, k, None) for k in OVERRIDES}
    return load_settings(getattr(args, "env_file", None), **overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "settings-table":
        print(settings_table())
        return 0
    try:
        settings = settings_from(args)
    except (ValidationError, FileNotFoundError) as exc:
        print(f"shrink-proxy: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings)
    parser.error(f"unknown command {args.command}")
    return 2


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
    from proxy.app import create_app

    logs.configure(settings.log_level, settings.log_format)
    log.info(
        "shrink-proxy %s listening on http://%s:%d/v1 -> upstream %s",
        __version__,
        settings.host,
        settings.port,
        settings.upstream_url,
    )
    if is_public(settings.host):
        log.warning(
            "binding %s exposes the proxy beyond this machine: anyone who can reach it can use "
            "your upstream (and its key)",
            settings.host,
        )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        server_header=False,
        access_log=False,
        timeout_graceful_shutdown=30,
    )
    return 0
