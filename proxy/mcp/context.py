"""estimate_context, trim_context, compact_context: the proxy's planning over a message list.

Boundary: messages in, in a wire format the engine plans (`proxy.wire.formats`: Chat Completions,
or Anthropic Messages), validated as the HTTP edge validates a request body; the engine façade
(`Shrinker.plan_sync`) plans them exactly as the proxy's route would for the same model, window
and completion reserve, and a plain dict comes out: the messages, the pipeline's report and the
counter used (a tiktoken encoding, or the labelled bytes/4 estimate).

A compact's summary comes from the caller when it passes one (the facts it lost are appended, as
for a model's), else from the configured summarizer, else nowhere: the plan alone, its marker
listing the dropped span's key lines, with what a summary would replace.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any

import orjson

from proxy.pipeline import Plan
from proxy.pipeline.facts import extract_facts, missing_facts
from proxy.pipeline.summary import apply_summary, render_transcript, summary_message
from proxy.pipeline.types import Mode, StageAction
from proxy.settings import Settings
from proxy.shrinker import Shrinker
from proxy.summarizer import Summarizer
from proxy.tokenizers import Tokenizers
from proxy.wire.formats import FORMATS, WireFormat

KEEP_LAST_SHRINKERS = 4  # shrinkers kept for a per-call keep_last (each has its own memo)
TRANSCRIPT_CHARS = 24_000  # the dropped span, rendered for a caller that writes the summary


class Context:
    def __init__(
        self,
        settings: Settings,
        shrinker: Shrinker,
        tokenizers: Tokenizers,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.settings = settings
        self.shrinker = shrinker
        self.tokenizers = tokenizers
        self.summarizer = summarizer
        self._by_keep_last: OrderedDict[int, Shrinker] = OrderedDict()
        self._lock = threading.Lock()  # plans run in worker threads

    def body(
        self,
        fmt: WireFormat,
        messages: list[Any],
        model: str | None,
        max_tokens: int | None,
        tools: list[Any] | None = None,
        system: Any = None,
    ) -> dict[str, Any]:
        """The request body the proxy would receive, validated by the edge's own parser."""
        body: dict[str, Any] = {"messages": messages}
        if model is not None:
            body["model"] = model
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = tools
        if system is not None:
            body["system"] = system
        return fmt.parse(orjson.dumps(body))

    def counter_info(self, model: str | None) -> dict[str, Any]:
        counter = self.tokenizers.for_model(model)
        info: dict[str, Any] = {"name": counter.name, "exact": counter.exact}
        if not counter.exact:
            info["note"] = counter.note or "bytes/4 estimate: no tiktoken encoding available"
        return info

    def estimate(
        self,
        messages: list[Any],
        model: str | None = None,
        context_window: int | None = None,
        max_tokens: int | None = None,
        tools: list[Any] | None = None,
        wire: str = "chat",
        system: Any = None,
    ) -> dict[str, Any]:
        fmt = FORMATS[wire]
        body = self.body(fmt, messages, model, max_tokens, tools, system)
        plan = self.shrinker.plan_sync(body, "off", context_window, ahead=False, fmt=fmt)
        tokens = self.tokenizers.for_model(model)
        counter = fmt.counter(tokens)
        r = plan.report
        return {
            "tokens": r.tokens_before,
            "per_message": [counter.count_message(m) for m in body["messages"]],
            "fixed_tokens": fmt.fixed_tokens(body, tokens),
            "budget": r.budget,
            "window": r.window,
            "fits": r.tokens_before <= r.budget,
            "should_trim": r.tokens_before > r.budget,
            "over_by": max(0, r.tokens_before - r.budget),
            "counter": self.counter_info(model),
        }

    def plan(
        self,
        mode: Mode,
        messages: list[Any],
        model: str | None = None,
        context_window: int | None = None,
        max_tokens: int | None = None,
        keep_last: int | None = None,
        wire: str = "chat",
        system: Any = None,
    ) -> Plan:
        """The route's plan in `mode` (sync: run it in a thread). In compact mode, stage 2's
        cut before any summary: see `summarize`."""
        fmt = FORMATS[wire]
        body = self.body(fmt, messages, model, max_tokens, system=system)
        shrinker = self._shrinker(keep_last)
        return shrinker.plan_sync(body, mode, context_window, ahead=False, fmt=fmt)

    async def summarize(
        self,
        plan: Plan,
        model: str | None,
        summary: str | None,
        include_transcript: bool,
        wire: str = "chat",
    ) -> dict[str, Any]:
        """The compact's result: the plan with its marker replaced by a summary when one is
        given or made in time, else the plan alone (and the transcript to summarise, if asked)."""
        if not plan.span or plan.marker_index is None:
            return self.result(plan, model, {"source": "none", "reason": "nothing was dropped"})
        dialect = FORMATS[wire].dialect
        dropped = {"dropped_messages": len(plan.span), "first_dropped": plan.marker_index}
        text: str | None = None
        if summary is not None and summary.strip():
            lost = missing_facts(summary, extract_facts(plan.span, dialect=dialect))
            role = self.settings.summary_role
            text = summary_message(summary, lost, role=role, dropped=len(plan.span))["content"]
            info: dict[str, Any] = {"source": "caller", "facts_appended": len(lost)}
        elif self.summarizer is not None:
            outcome = await self.summarizer.summarize(
                plan.span, request_model=model, dialect=dialect
            )
            text = outcome.text
            info = {"source": outcome.source, "facts_added": outcome.facts_added}
            if outcome.error:
                info["error"] = outcome.error
        else:
            info = {
                "source": "none",
                "reason": "no summary given and no summarizer configured (SHRINK_SUMMARY_URL): "
                "plan only. Call compact_context again with `summary` to replace the marker.",
            }
        info |= dropped
        if text is None:
            if include_transcript:
                info["transcript"] = render_transcript(plan.span, TRANSCRIPT_CHARS, dialect)
            return self.result(plan, model, info)
        return self.result(self._with_summary(plan, model, text, info, wire), model, info)

    def _with_summary(
        self, plan: Plan, model: str | None, text: str, info: dict[str, Any], wire: str
    ) -> Plan:
        i = plan.marker_index
        assert i is not None
        fmt = FORMATS[wire]
        counter = fmt.counter(self.tokenizers.for_model(model))
        role = self.settings.summary_role
        messages = apply_summary(plan.messages, i, text, role, fmt.dialect)
        grown = counter.count_message(messages[i]) - counter.count_message(plan.messages[i])
        report = dataclasses.replace(plan.report, actions=dict(plan.report.actions))
        report.details = list(report.details)
        report.notes = list(report.notes)
        if report.tokens_after + grown > report.budget:
            info["applied"] = False
            report.notes.append("the summary did not fit; the trim marker was kept")
            return dataclasses.replace(plan, report=report)
        info["applied"] = True
        report.count("summary")
        after = counter.count_message(messages[i])
        report.details.append(
            StageAction("summary", i, f"summary of {len(plan.span)} messages", 0, after)
        )
        report.tokens_after += grown
        return dataclasses.replace(plan, messages=messages, report=report)

    def _shrinker(self, keep_last: int | None) -> Shrinker:
        if keep_last is None or keep_last == self.settings.keep_last:
            return self.shrinker
        with self._lock:
            hit = self._by_keep_last.get(keep_last)
            if hit is None:
                update = {"keep_last": keep_last, "plan_processes": 0}
                changed = self.settings.model_copy(update=update)
                hit = self._by_keep_last[keep_last] = Shrinker(changed, self.tokenizers)
                while len(self._by_keep_last) > KEEP_LAST_SHRINKERS:
                    self._by_keep_last.popitem(last=False)[1].close()
            self._by_keep_last.move_to_end(keep_last)
            return hit

    def result(
        self, plan: Plan, model: str | None, summary: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "messages": plan.messages,
            "changed": plan.changed,
            "report": dataclasses.asdict(plan.report),
            "counter": self.counter_info(model),
        }
        if summary is not None:
            out["summary"] = summary
        return out

    def close(self) -> None:
        for shrinker in self._by_keep_last.values():
            shrinker.close()
        self._by_keep_last.clear()
