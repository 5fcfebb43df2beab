"""Fact retention of compaction by summary over the spans a trim drops, and incremental savings.

    .venv/bin/python -m bench.summary_facts [DIR]

Each conversation goes through the real `Shrinker` at an 8k window (default settings). The span
is what stage 2 drops: the stage-1 output between the pinned system prompt and the cut. What
replaces it is scored on what the span held:

  marker      the plain trim marker (what mode `auto` inserts): retains nothing, the floor;
  stand-in    a deterministic EXTRACTIVE STAND-IN for a model summary, not a model: the first
              line of every transcript entry (`role: text`, `-> tool(args)`, `<- result`);
  +facts      the stand-in plus the "Facts kept verbatim" list (`summary_message`).

Scored, as substrings of the inserted text after whitespace normalising:
  paths       `path`/`cwd` arguments of the span's tool calls (structural, not regex-found);
  commands    `command` arguments of the span's tool calls (their first 120 chars);
  errors      tool-result lines matching a simple error pattern independent of the extractor
              (Error:/error:/ERROR/FAILED/fatal/npm error/Traceback's last line; not in code
              listings, diffs or `except` clauses; pytest's "E" prefix dropped; their first
              120 chars), deduplicated;
  needles     corpus needles whose message lies in the span.

Incremental: the conversation is replayed turn by turn (a request before every assistant
message); each time the dropped span changes, the summarizer request is built from scratch and
incrementally (the previous span's stand-in note plus only the new messages, when the previous
span is a prefix), and their sizes (chars/4) are summed.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from bench import corpus
from bench.corpus import Conversation, Message
from proxy.pipeline.facts import extract_facts, missing_facts, normalise
from proxy.pipeline.summary import render_transcript, summary_message, summary_request
from proxy.pipeline.units import pinned_count
from proxy.shrinker import Shrinker

WINDOW = 8192
KINDS = ("paths", "commands", "errors", "needles")
PREFIX = 120  # a long command or error line counts as kept when its first 120 chars are
_ERRORISH = re.compile(r"Error:|error:|ERROR|FAILED|^fatal|npm error|npm ERR!")
_CODE = re.compile(r"^\s*\d+\t|^[-+@]|.*\bexcept\b")  # `cat -n` listings, diffs, handlers


def stand_in(span: list[Message]) -> str:
    """EXTRACTIVE STAND-IN, not a model: the first line of every transcript entry."""
    transcript = render_transcript(span, 10**9)
    return "\n".join(
        line
        for line in transcript.splitlines()
        if re.match(r"^(?:[a-z]+: |-> |<- )", line) and line.strip()
    )


def truth(span: list[Message], conv: Conversation, start: int, cut: int) -> dict[str, list[str]]:
    """What the span held, per kind, found without the fact extractor."""
    paths: list[str] = []
    commands: list[str] = []
    errors: list[str] = []
    for m in span:
        for call in m.get("tool_calls") or []:
            args = json.loads(call["function"]["arguments"])
            commands += [normalise(args["command"])[:PREFIX]] if "command" in args else []
            paths += [args[k] for k in ("path", "cwd") if isinstance(args.get(k), str)]
        if m.get("role") == "tool" and isinstance(m.get("content"), str):
            lines = m["content"].splitlines()
            for i, line in enumerate(lines):
                if line.startswith("Traceback"):
                    tail = [x for x in lines[i + 1 :] if x and not x[0].isspace()]
                    errors += tail[:1]
                elif _ERRORISH.search(line) and not _CODE.match(line):
                    errors.append(re.sub(r"^E\s+", "", line))  # pytest's "E   " is decoration
    needles = [n.answer for n in conv.needles if start <= n.message_index < cut]
    return {
        "paths": list(dict.fromkeys(paths)),
        "commands": list(dict.fromkeys(commands)),
        "errors": list(dict.fromkeys(normalise(e)[:PREFIX] for e in errors if e.strip())),
        "needles": list(dict.fromkeys(needles)),
    }


def kept(text: str, items: Iterable[str]) -> int:
    normal = normalise(text)
    return sum(1 for item in items if normalise(item) in normal)


def dropped_span(sh: Shrinker, conv: Conversation, messages: list[Message]) -> tuple[int, int]:
    """(start, cut) of what stage 2 drops from `messages`, or (0, 0) when nothing is dropped."""
    plan = sh.plan_sync(conv.request(messages), "auto")
    cut = next((d.index for d in plan.report.details if d.stage == "trim"), None)
    if cut is None:
        return 0, 0
    return pinned_count(messages), cut


def tokens(body: dict[str, Any]) -> int:
    return len(body["messages"][0]["content"]) // 4


def score(
    rows: list[tuple[str, Conversation, int, list[Message]]], count: Callable[[str], int]
) -> None:
    """Print per-span and overall retention for spans given as (name, first index, span)."""
    totals = {v: dict.fromkeys(KINDS, 0) for v in ("marker", "stand-in", "+facts", "held")}
    size = {"span": 0, "marker": 0, "stand-in": 0, "+facts": 0}
    print(
        f"{'conversation':44} {'msgs':>4} {'span tok':>8} {'paths':>9} {'commands':>9} "
        f"{'errors':>9} {'needles':>9}  (+facts: kept/held)"
    )
    for name, conv, start, span in rows:
        held = truth(span, conv, start, start + len(span))
        note = stand_in(span)
        facts = extract_facts(span)
        lost = missing_facts(note, facts)
        with_facts = summary_message(note, lost, role="system", dropped=len(span))["content"]
        span_tokens = sum(count(json.dumps(m)) for m in span)
        size["span"] += span_tokens
        size["stand-in"] += count(note)
        size["+facts"] += count(with_facts)
        for kind in KINDS:
            totals["held"][kind] += len(held[kind])
            totals["stand-in"][kind] += kept(note, held[kind])
            totals["+facts"][kind] += kept(with_facts, held[kind])
        cells = " ".join(f"{kept(with_facts, held[k]):>4}/{len(held[k]):<4}" for k in KINDS)
        print(f"{name:44} {len(span):>4} {span_tokens:>8,} {cells}")
    print("share retained over all spans (micro-average); tokens of the inserted text:")
    print(f"  {'variant':10} " + " ".join(f"{k:>9}" for k in KINDS) + f" {'tokens':>9}")
    for variant in ("marker", "stand-in", "+facts"):
        held_all = totals["held"]
        shares = " ".join(f"{totals[variant][k] / max(held_all[k], 1):>9.0%}" for k in KINDS)
        print(f"  {variant:10} {shares} {size[variant]:>9,}")
    print(
        f"  {'held':10} "
        + " ".join(f"{totals['held'][k]:>9}" for k in KINDS)
        + f" {size['span']:>9,}  (items in the spans; tokens of the spans as JSON)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="corpus directory (default: the dev set)")
    args = parser.parse_args()
    corpus.setup_environment()
    sh = Shrinker(corpus.settings(context_window=WINDOW), corpus.tokenizers())
    count = sh.tokenizers.for_model(corpus.MODEL).count_text
    conversations = corpus.load(args.directory)

    trimmed = []
    for conv in conversations:
        start, cut = dropped_span(sh, conv, conv.messages)
        if cut > start:
            stage1 = sh.plan_sync(conv.request(), "tools").messages
            trimmed.append((conv.id, conv, start, stage1[start:cut]))
    print(f"A. spans that stage 2 drops at a {WINDOW:,} window ({len(trimmed)} conversations):")
    score(trimmed, count)

    halves = []
    for conv in conversations:
        stage1 = sh.plan_sync(conv.request(), "tools").messages
        start = pinned_count(stage1)
        halves.append((conv.id, conv, start, stage1[start : len(stage1) // 2 + 1]))
    print("\nB. the first half of every conversation (after stage 1):")
    score(halves, count)
    incremental(sh, conversations)


def carried_user(sh: Shrinker, conv: Conversation, messages: list[Message], cut: int) -> int | None:
    """Index of the user message stage 2 carried across its cut (kept verbatim), if any."""
    plan = sh.plan_sync(conv.request(messages), "auto").messages
    stage1 = sh.plan_sync(conv.request(messages), "tools").messages
    p = pinned_count(messages)
    after_marker = plan[p + 1] if len(plan) > p + 1 else None
    for i in range(cut - 1, p - 1, -1):
        if stage1[i].get("role") == "user" and stage1[i] == after_marker:
            return i
    return None


def incremental(sh: Shrinker, conversations: list[Conversation]) -> None:
    """Summarizer input over a replay: whole span every time vs previous note + new messages.

    Two definitions of the span: everything between the pinned prompt and the cut, and the same
    without the user message that stage 2 carries across the cut (it is kept verbatim anyway).
    """
    print(f"\nC. incremental summaries over a turn-by-turn replay at {WINDOW:,}:")
    for with_carried in (True, False):
        full_total = incr_total = calls = prefix_hits = 0
        for conv in conversations:
            ms = conv.messages
            requests = [ms[:i] for i, m in enumerate(ms) if m.get("role") == "assistant" and i]
            requests.append(ms)
            previous: list[Message] | None = None
            for messages in requests:
                start, cut = dropped_span(sh, conv, messages)
                if cut <= start:
                    continue
                stage1 = sh.plan_sync(conv.request(messages), "tools").messages
                carried = None if with_carried else carried_user(sh, conv, messages, cut)
                span = [m for i, m in enumerate(stage1[start:cut], start) if i != carried]
                if previous is not None and span == previous:
                    continue  # the sticky cut held: a cache hit, no summarizer call
                calls += 1
                full = summary_request(span, model="m", previous=None, max_tokens=600)
                full_total += tokens(full)
                if previous is not None and span[: len(previous)] == previous:
                    prefix_hits += 1
                    body = summary_request(
                        span[len(previous) :],
                        model="m",
                        previous=stand_in(previous),
                        max_tokens=600,
                    )
                    incr_total += tokens(body)
                else:
                    incr_total += tokens(full)
                previous = span
        label = "span = pinned..cut" if with_carried else "span without the carried user message"
        print(f"  {label}:")
        print(f"    summarizer calls {calls}, {prefix_hits} extend the previous span")
        print(
            f"    summarizer input: whole span each time {full_total:,} tokens (chars/4), "
            f"incremental {incr_total:,} ({incr_total / max(full_total, 1):.0%})"
        )


if __name__ == "__main__":
    main()
