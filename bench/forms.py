"""What the benches of the other wire forms (bench.anthropic, bench.responses) measure alike: the
dev corpus's needles, tokens, fits and pairing once each conversation is shrunk in its form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import corpus
from bench.corpus import CLASSES, Conversation
from bench.quality import class_totals
from proxy.pipeline import Report
from proxy.shrinker import Shrinker

# One conversation shrunk in a form: (the plan's report, the shrunk request's text, pairing ok).
Shrunk = Callable[[Conversation], tuple[Report, str, bool]]


def chat_shrunk(sh: Shrinker, conv: Conversation) -> tuple[Report, str, bool]:
    """`conv` shrunk as /v1/chat/completions shrinks it: the reference form."""
    plan = sh.plan_sync(conv.request(), "auto")
    return plan.report, corpus.haystack(plan.messages), corpus.pairing_ok(plan.messages)


def quality(convs: list[Conversation], shrunk: Shrunk) -> dict[str, Any]:
    """Needles kept by class, tokens before/saved, fits and pairing over the corpus."""
    kept = dict.fromkeys(CLASSES, 0)
    total = dict.fromkeys(CLASSES, 0)
    before = saved = fits = paired = 0
    for conv in convs:
        r, hay, ok = shrunk(conv)
        for cls, n in class_totals(conv).items():
            total[cls] += n
        for needle in conv.needles:
            kept[needle.cls] += needle.answer in hay
        before += r.tokens_before
        saved += r.tokens_before - r.tokens_after
        fits += r.fits
        paired += ok
    return {"kept": kept, "total": total, "before": before, "saved": saved, "fits": fits,
            "paired": paired, "conversations": len(convs)}  # fmt: skip


def quality_line(form: str, q: dict[str, Any]) -> str:
    cells = ", ".join(f"{c} {q['kept'][c]}/{q['total'][c]}" for c in CLASSES if q["total"][c])
    kept, total = sum(q["kept"].values()), sum(q["total"].values())
    return (
        f"  {form:<9} needles {kept}/{total} ({kept / max(total, 1):.1%}: {cells}); saved "
        f"{q['saved'] / max(q['before'], 1):.1%} of {q['before']:,} tokens; fit "
        f"{q['fits']}/{q['conversations']}; pairing ok {q['paired']}/{q['conversations']}"
    )
