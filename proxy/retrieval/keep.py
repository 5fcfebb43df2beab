"""The edge's half of retrieval: the plan's figures with or without the tool, whether a request
wants it, and the plan's originals kept in the store before the request goes upstream (so a ref
the model reads is always there)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.pipeline import Plan
from proxy.pipeline.dialect import Dialect
from proxy.pipeline.summary import full_transcript
from proxy.retrieval.store import Store

if TYPE_CHECKING:
    from fastapi import Request

    from proxy.settings import Settings

HEADER = "x-shrink-retrieve"


def retrieval_wanted(request: Request, settings: Settings) -> bool:
    """The in-flight tool for this request: on with the setting, unless the client says
    `x-shrink-retrieve: off` (refs stay in the markers either way: the plan is the same)."""
    value = request.headers.get(HEADER, "").strip().lower()
    return settings.retrieve and value not in ("off", "0", "false", "no")


async def keep(store: Store, plan: Plan, dialect: Dialect) -> None:
    """Put the originals of the plan's refs the store does not hold yet. A dropped span is
    rendered as a transcript only then: a cut that stays costs no rendering on later turns."""
    items = {}
    for ref, original in plan.refs.items():
        if store.holds(ref):
            continue
        items[ref] = original if isinstance(original, str) else full_transcript(original, dialect)
    if items:
        await store.put(items)


def with_tool(plan: Plan, tool: int) -> Plan:
    """The plan's figures once it is known whether the retrieval tool (`tool` tokens, planned
    for) goes with it: only when the shrunk messages name a ref, and never to make the request
    larger than the client's. The client sent no such tool: its figure is not counted before."""
    if not tool:
        return plan
    report = plan.report
    report.tokens_before -= tool
    if plan.refs and plan.changed and report.tokens_after < report.tokens_before:
        plan.retrieval_tool, plan.tool_tokens = True, tool
    else:
        report.tokens_after -= tool
    return plan
