"""`shrink-proxy mcp`: the MCP server on stdin/stdout, for agents that launch their tools.

Boundary: Settings in, a served session out. stdout is the protocol: logs go to stderr (the
proxy's own log set-up), and while serving the SDK points fd 1 at stderr, so a stray print or a
child's output can never corrupt the stream. Everything runs locally: command execution is on,
confined to the workspace root; summaries come from `SHRINK_SUMMARY_URL` when it is set.
"""

from __future__ import annotations

import logging

import httpx

from proxy.settings import Settings

log = logging.getLogger(__name__)

MISSING = (
    "shrink-proxy mcp needs the MCP SDK, an optional extra: pip install 'shrink-proxy[mcp]' "
    "(from a checkout: pip install -e '.[mcp]')"
)


async def serve(settings: Settings) -> None:
    from proxy.app import build_summarizer, build_tokenizers
    from proxy.mcp.context import Context
    from proxy.mcp.server import Engine, build_server, build_store
    from proxy.shrinker import Shrinker

    tokenizers = build_tokenizers(settings)
    shrinker = Shrinker(settings, tokenizers)
    timeout = httpx.Timeout(settings.summary_call_timeout, connect=settings.connect_timeout)
    async with httpx.AsyncClient(timeout=timeout) as client:
        summarizer = build_summarizer(settings, client) if settings.summary_url else None
        context = Context(settings, shrinker, tokenizers, summarizer)
        engine = Engine(settings, build_store(settings), context)
        server = build_server(lambda: engine, allow_exec=True)
        log.info(
            "shrink-proxy MCP server on stdio; commands run in %s%s",
            engine.workspace,
            " through /bin/sh" if settings.mcp_shell else "",
        )
        try:
            await server.run_stdio_async()
        finally:
            if summarizer is not None:
                await summarizer.aclose()
            context.close()
            shrinker.close()
