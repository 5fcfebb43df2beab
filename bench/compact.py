"""Compact vs trim: needles kept, summarizer calls and prefix stability, per window.

    .venv/bin/python -m bench.compact [DIR]
        [--json FILE] [--windows 16384 8192] [--set NAME=VALUE]

Each conversation is replayed as bench/prefix replays it (a request before every assistant
message, then the whole conversation) through the real `Shrinker` in mode `trim` and in mode
`compact`. In compact mode, when stage 2 dropped a span, its summary is produced as the route's
`with_summary` and the Summarizer produce it, minus HTTP: summary -> `missing_facts` ->
`summary_message` -> `apply_summary`, cached by `span_key`, and the marker is kept when the summary
does not fit the budget.

The summarizer is a DETERMINISTIC EXTRACTIVE STAND-IN, not a model: the first line of every
message of the span and the command of every tool call, cut to `summary_max_tokens`. No model runs
fast enough on this machine for every span of the corpus, so needle figures for compact measure
the pipeline around a summary (room reserved, facts appended, placement), not summary quality.

Needles (scored on the whole-conversation request, as bench/quality does) are kept when their
answer is a substring of a message content or tool-call argument. Breaks and reuse are counted as
bench/prefix counts them. `compact-late` replays compact with a summarizer slower than
`summary_timeout`: the first request for a new span gets the marker, later ones the summary.
"""

from __future__ import annotations

import argparse
from collections import Counter as Tally
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bench import corpus
from bench.corpus import CLASSES, Conversation, Message
from bench.prefix import Renderer, cause, turns
from bench.quality import class_totals, score
from proxy.pipeline import Plan
from proxy.pipeline.facts import COMMAND_KEYS
from proxy.pipeline.summary import (
    apply_summary,
    extract_facts,
    missing_facts,
    span_key,
    summary_message,
)
from proxy.pipeline.types import Report
from proxy.settings import Settings
from proxy.shrinker import CompactMemo, Shrinker
from proxy.tokenizers import Tokenizers

WINDOWS = (16384, 8192)
STRATEGIES = ("trim", "compact", "compact-late")
LINE_CHARS = 200  # one stand-in line at most: a one-line JSON dump must not take the whole note
STAND_IN_LABEL = (
    "summarizer: DETERMINISTIC EXTRACTIVE STAND-IN (first line of each span message + each tool "
    "call's command, cut to summary_max_tokens), not a model: no model runs fast enough here "
    "for every span of the corpus"
)


def _first_line(content: Any) -> str:
    if isinstance(content, list):
        content = "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if not isinstance(content, str):
        return ""
    return next((line.strip() for line in content.splitlines() if line.strip()), "")[:LINE_CHARS]


def _command(call: Any) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return ""
    raw = fn.get("arguments")
    try:
        args = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        args = raw
    cmd = next((args[k] for k in COMMAND_KEYS if isinstance(args, dict) and k in args), None)
    text = cmd if isinstance(cmd, str) else orjson.dumps(args).decode()
    return f"-> {fn.get('name', 'tool')}: {_first_line(text) or text[:LINE_CHARS]}"


def stand_in(span: list[Message], tokenizers: Tokenizers, max_tokens: int) -> str:
    """EXTRACTIVE STAND-IN for a model summary: first lines and commands, `max_tokens` at most."""
    lines = []
    for m in span:
        first = _first_line(m.get("content"))
        if first:
            lines.append(f"{m.get('role')}: {first}")
        lines.extend(c for c in map(_command, m.get("tool_calls") or []) if c)
    encoding = tokenizers.for_model(corpus.MODEL).encoding
    assert encoding is not None  # corpus.tokenizers() checked the encoding is exact
    tokens = encoding.encode_ordinary("\n".join(lines))
    return encoding.decode(tokens[:max_tokens])


@dataclass
class Summaries:
    """The Summarizer's cache, without HTTP: text by `span_key`, calls and incremental calls."""

    settings: Settings
    tokenizers: Tokenizers
    cache: dict[str, str] = field(default_factory=dict)
    spans: dict[str, list[int]] = field(default_factory=dict)  # first-message key -> lengths
    calls: int = 0
    incremental: int = 0

    def key(self, span: list[Message]) -> str:
        s = self.settings
        model = s.summary_model or corpus.MODEL
        return span_key(
            span, model=model, settings_fingerprint=f"{s.summary_model}|{s.summary_max_tokens}"
        )

    def text(self, span: list[Message]) -> str:
        key = self.key(span)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        self.calls += 1
        first = self.key(span[:1])
        lengths = self.spans.setdefault(first, [])
        # Incremental when a cached note covers a proper prefix (the sticky cut moved on).
        self.incremental += any(n < len(span) and self.key(span[:n]) in self.cache for n in lengths)
        s = self.settings
        summary = stand_in(span, self.tokenizers, s.summary_max_tokens)
        lost = missing_facts(summary, extract_facts(span))
        text = summary_message(summary, lost, role=s.summary_role, dropped=len(span))["content"]
        self.cache[key] = text
        lengths.append(len(span))
        return text


@dataclass
class Turn:
    messages: list[Message]
    report: Report
    state: str  # "none" (no span), "summary", "marker" (did not fit), "late" (not ready yet)
    index: int | None = None  # where the marker or the summary sits


def with_summary(plan: Plan, summaries: Summaries, tokenizers: Tokenizers, late: bool) -> Turn:
    """The route's `with_summary` without HTTP; `late`: the summary is not ready on first ask."""
    report = plan.report
    i = plan.marker_index
    if not plan.span or i is None:
        return Turn(plan.messages, report, "none")
    ready = summaries.key(plan.span) in summaries.cache
    text = summaries.text(plan.span)
    if late and not ready:
        return Turn(plan.messages, report, "late", i)
    s = summaries.settings
    messages = apply_summary(plan.messages, i, text, s.summary_role)
    counter = tokenizers.for_model(corpus.MODEL)
    grown = counter.count_message(messages[i]) - counter.count_message(plan.messages[i])
    if report.tokens_after + grown > report.budget:
        return Turn(plan.messages, report, "marker", i)
    report.tokens_after += grown
    report.fits = report.tokens_after <= report.budget
    return Turn(messages, report, "summary", i)


@dataclass
class Row:
    """One conversation at one window for one strategy."""

    id: str
    turns: int = 0
    transitions: int = 0
    breaks: int = 0
    reused: int = 0
    prompt: int = 0
    fits_all: int = 0  # turns that fit
    before: int = 0  # the whole-conversation request
    after: int = 0
    fits: int = 0  # 1 when the whole-conversation request fits (a count in totals)
    kept: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    # Needles kept only because the message standing in for the dropped span holds them (trim:
    # the marker and its facts list; compact: the summary with its facts).
    via_span: int = 0
    calls: int = 0
    incremental: int = 0
    states: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)


def replay(
    conv: Conversation, name: str, sh: Shrinker, summaries: Summaries, renderer: Renderer
) -> Row:
    row = Row(conv.id)
    tools = renderer.tools(conv.tools)
    prev: Turn | None = None
    states: Tally[str] = Tally()
    causes: Tally[str] = Tally()
    calls0, inc0 = summaries.calls, summaries.incremental
    for request in turns(conv):
        plan = sh.plan_sync(conv.request(request), "trim" if name == "trim" else "compact")
        if name == "trim":
            turn = Turn(plan.messages, plan.report, "none", plan.marker_index)
        else:
            turn = with_summary(plan, summaries, sh.tokenizers, late=name == "compact-late")
        states[turn.state] += 1
        row.turns += 1
        row.fits_all += turn.report.fits
        row.prompt += tools + renderer.size(turn.messages)
        if prev is not None:
            row.transitions += 1
            shared, position = renderer.common(prev.messages, turn.messages)
            row.reused += tools + shared
            if position is not None:
                row.breaks += 1
                why = cause(prev.report, turn.report)
                if why == "other" and prev.state != turn.state:
                    why = f"{prev.state}->{turn.state}"
                causes[why] += 1
        prev = turn
    assert prev is not None
    row.before, row.after = prev.report.tokens_before, prev.report.tokens_after
    row.fits = int(prev.report.fits)
    row.kept, _ = score(conv, prev.messages)
    row.total = class_totals(conv)
    if prev.index is not None:
        without = prev.messages[: prev.index] + prev.messages[prev.index + 1 :]
        row.via_span = sum(row.kept.values()) - sum(score(conv, without)[0].values())
    row.calls, row.incremental = summaries.calls - calls0, summaries.incremental - inc0
    row.states, row.causes = dict(states), dict(causes)
    return row


def add(total: Row, row: Row) -> None:
    for f in ("turns", "transitions", "breaks", "reused", "prompt", "fits_all", "before", "after"):
        setattr(total, f, getattr(total, f) + getattr(row, f))
    for f in ("fits", "via_span", "calls", "incremental"):
        setattr(total, f, getattr(total, f) + getattr(row, f))
    for attr in ("kept", "total", "states", "causes"):
        mine = getattr(total, attr)
        for k, v in getattr(row, attr).items():
            mine[k] = mine.get(k, 0) + v


def cell(row: Row, cls: str) -> str:
    return f"{row.kept.get(cls, 0)}/{row.total.get(cls, 0)}"


def print_window(window: int, rows: dict[str, list[Row]], totals: dict[str, Row]) -> None:
    print(f"\n=== window {window:,} ===")
    print(
        f"{'conversation':<36}{'before':>8}{'trim':>8}{'fit':>4}{'compact':>8}{'fit':>4}"
        f"{'crit t/c':>10}{'inc t/c':>10}{'rec t/c':>9}{'via t/c':>8}{'calls':>6}{'incr':>5}"
        f"{'breaks t/c/l':>14}{'reuse t/c':>13}"
    )
    for t, c, late in zip(rows["trim"], rows["compact"], rows["compact-late"], strict=True):
        needles = "".join(
            f"{cell(t, k) + ' ' + cell(c, k):>{w}}"
            for k, w in zip(CLASSES, (10, 10, 9), strict=True)
        )
        reuse = f"{t.reused / t.prompt:.0%} {c.reused / c.prompt:.0%}"
        print(
            f"{t.id[:35]:<36}{t.before:>8,}{t.after:>8,}{'y' if t.fits else 'N':>4}"
            f"{c.after:>8,}{'y' if c.fits else 'N':>4}{needles}{f'{t.via_span}/{c.via_span}':>8}"
            f"{c.calls:>6}{c.incremental:>5}{f'{t.breaks}/{c.breaks}/{late.breaks}':>14}"
            f"{reuse:>13}"
        )
    n = len(rows["trim"])
    for name, t in totals.items():
        kept = "  ".join(f"{k} {cell(t, k)}" for k in CLASSES)
        print(
            f"  {name:<12} saved {t.before - t.after:,} of {t.before:,} "
            f"({(t.before - t.after) / t.before:.1%}); fit {t.fits}/{n} (turns {t.fits_all}/"
            f"{t.turns}); {kept}; breaks {t.breaks}/{t.transitions} "
            f"({t.breaks / t.transitions:.1%}); reuse {t.reused:,}/{t.prompt:,} "
            f"({t.reused / t.prompt:.1%})"
        )
        if name != "trim":
            print(
                f"  {'':<12} summarizer calls {t.calls} ({t.calls / n:.2f} per conversation; "
                f"{t.incremental} could be incremental); turns by state "
                f"{dict(sorted(t.states.items()))}"
            )
        print(
            f"  {'':<12} needles found only in the message standing for the dropped span "
            f"(trim: marker + facts; compact: summary + facts) {t.via_span}; breaks by cause "
            f"{dict(sorted(t.causes.items())) or 'none'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    args, overrides, convs, tokenizers = corpus.start(parser)
    renderer = Renderer(tokenizers.for_model(corpus.MODEL))
    memo = CompactMemo(1 << 16)
    print(
        f"corpus: {args.dir or corpus.DEFAULT_DIR} ({len(convs)} conversations, "
        f"{sum(len(turns(c)) for c in convs)} turns); {args.set or 'default settings'}"
    )
    print(STAND_IN_LABEL)
    raw: dict[str, Any] = {"summarizer": STAND_IN_LABEL, "windows": {}}
    for window in args.windows:
        settings = corpus.settings(context_window=window, **overrides)
        rows: dict[str, list[Row]] = {}
        totals: dict[str, Row] = {}
        for name in STRATEGIES:
            sh = Shrinker(settings, tokenizers)
            sh.memo = memo
            summaries = Summaries(settings, tokenizers)  # one cache per run, as in one proxy
            rows[name] = [replay(c, name, sh, summaries, renderer) for c in convs]
            totals[name] = Row("total")
            for r in rows[name]:
                add(totals[name], r)
        print_window(window, rows, totals)
        raw["windows"][str(window)] = {
            name: {"rows": [asdict(r) for r in rows[name]], "total": asdict(totals[name])}
            for name in STRATEGIES
        }
    corpus.write_json(args.json, raw)


if __name__ == "__main__":
    main()
