"""estimate_context / trim_context / compact_context plan exactly as the proxy would.

In-process over `proxy.mcp.context.Context`: the same Shrinker façade and settings as a request
to `/v1/chat/completions`, the counter named (tiktoken's encoding, or the labelled estimate), and
the three sources of a compact's summary: the caller's, the configured summarizer's, none.
"""

from __future__ import annotations

import asyncio

import httpx

from proxy.app import build_summarizer, build_tokenizers
from proxy.mcp.context import Context
from proxy.settings import Settings
from proxy.shrinker import Shrinker
from proxy.tokenizers import Tokenizers
from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer
from tests.mcp_client import conversation


def context(settings: Settings, tokenizers: Tokenizers | None = None, summarizer=None) -> Context:
    tokenizers = tokenizers or build_tokenizers(settings)
    return Context(settings, Shrinker(settings, tokenizers), tokenizers, summarizer)


def test_trim_is_the_proxys_own_plan():
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    ctx = context(settings)
    messages = conversation()
    body = {"model": "qwen2.5-coder", "messages": messages, "max_tokens": 512}
    expected = Shrinker(settings, build_tokenizers(settings)).plan_sync(body, "trim", 4096)
    got = ctx.result(ctx.plan("trim", messages, "qwen2.5-coder", 4096, 512), "qwen2.5-coder")
    assert got["messages"] == expected.messages and got["changed"]
    assert got["report"]["tokens_after"] == expected.report.tokens_after
    est = ctx.estimate(messages, "qwen2.5-coder", 4096, 512)
    assert est["tokens"] == expected.report.tokens_before
    assert est["budget"] == expected.report.budget
    assert est["tokens"] == sum(est["per_message"]) + 3  # reply priming
    fits = ctx.estimate(messages[-1:], None, 4096)
    assert fits["fits"] and not fits["should_trim"] and fits["over_by"] == 0


def test_the_estimate_is_labelled_when_no_encoding_is_available():
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    ctx = context(settings, Tokenizers(cache_dir=""))
    est = ctx.estimate(conversation(4), "gpt-4o")
    assert est["counter"]["name"] == "estimate" and est["counter"]["exact"] is False
    assert est["counter"]["note"]


def test_compact_summary_from_the_configured_summarizer_else_plan_only():
    fake = FakeSummarizer()
    fake.content = "Long turns about words; a test failed."
    messages = conversation()
    with serve(fake.app()) as url:
        settings = Settings(_env_file=None, summary_url=url + "/v1", summary_model="s")  # type: ignore[call-arg]

        async def main():
            async with httpx.AsyncClient() as client:
                ctx = context(settings, summarizer=build_summarizer(settings, client))
                plan = ctx.plan("compact", messages, None, 4096)
                made = await ctx.summarize(plan, None, None, False)
                alone = context(settings)
                plan = alone.plan("compact", messages, None, 4096)
                planned = await alone.summarize(plan, None, None, True)
                return made, planned

        made, planned = asyncio.run(main())
    assert made["summary"]["source"] == "model" and made["summary"]["applied"]
    assert made["messages"][1]["content"].startswith("[shrink-proxy: summary of")
    assert "Long turns about words" in made["messages"][1]["content"]
    assert made["report"]["fits"]
    assert planned["summary"]["source"] == "none" and "turn 0" in planned["summary"]["transcript"]
    assert "omitted" in planned["messages"][1]["content"]  # the marker stays, with its facts


def anthropic_conversation(turns: int = 30) -> list[dict]:
    messages: list[dict] = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"turn {i}: " + "word " * 400})
    messages += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "sh", "input": {"cmd": "pytest"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "FAILED test_x"}],
        },
    ]
    return messages


def test_anthropic_messages_are_planned_by_their_own_dialect():
    from proxy.wire.formats import ANTHROPIC_WIRE

    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    ctx = context(settings)
    messages = anthropic_conversation()
    body = {"model": "claude-x", "messages": messages, "max_tokens": 512, "system": "terse"}
    sh = Shrinker(settings, build_tokenizers(settings))
    expected = sh.plan_sync(body, "trim", 4096, fmt=ANTHROPIC_WIRE)
    plan = ctx.plan("trim", messages, "claude-x", 4096, 512, None, "anthropic", "terse")
    got = ctx.result(plan, "claude-x")
    assert got["messages"] == expected.messages and got["report"]["fits"]
    assert got["messages"][-2:] == messages[-2:]  # the tool_use / tool_result pair, whole
    assert all(m["role"] in ("user", "assistant") for m in got["messages"])  # no system role
    est = ctx.estimate(messages, "claude-x", 4096, 512, None, "anthropic", "terse")
    assert est["tokens"] == expected.report.tokens_before and est["should_trim"]

    async def compact():
        plan = ctx.plan("compact", messages, "claude-x", 4096, 512, None, "anthropic", "terse")
        summary = "Words, then a failed test."
        return await ctx.summarize(plan, "claude-x", summary, False, "anthropic")

    done = asyncio.run(compact())
    assert done["summary"]["applied"]
    i = done["summary"]["first_dropped"]
    assert done["messages"][i]["role"] in ("user", "assistant")
    assert "Words, then a failed test." in str(done["messages"][i]["content"])
