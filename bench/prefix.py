"""Prefix-cache stability: how often a shrunk prompt stops being an extension of the last one.

    .venv/bin/python -m bench.prefix [DIR]
        [--json FILE] [--sweep] [--verbose]

Each conversation is replayed as an agent sends it: one request per point where the assistant
answers next (messages[:i] for every assistant message i), then the whole conversation. Every
request goes through one real `Shrinker` per window (16k, 8k, 4k; default settings; its memo and
token cache live across turns, as in the proxy). A turn *breaks* when the previous shrunk
request's messages are not an exact prefix of this one's: the backend must then re-read the
whole prompt. Reuse is the share of prompt tokens a prefix cache can serve: the sum over turns of
the longest common token prefix with the previous request, over the sum of prompt tokens (first
turns reuse nothing). Tokens are those of a plain chat rendering (tools, then per message its
role, content and tool calls), encoded per message.

The seed baseline (bench/baseline.py) is recomputed every turn the same way; `raw` is the
unshrunk conversation, the upper bound on reuse (it does not fit, so it is only a reference).
Each break of ours is blamed on what moved: `trim began`, `cut moved` (stage 2 picked another
cut: a new marker, maybe a new carried user message), `stage 3` (the newest turn was cut
head+tail and that cut changed), or `other`. `fill` is the share of the prompt budget the turns
stage 2 trimmed use: a cut that moves deeper than it needs leaves a small budget mostly empty.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bench import corpus
from bench.baseline import seed_plan
from bench.corpus import Conversation, Message
from proxy.pipeline import REPLY_PRIMING
from proxy.pipeline.types import Report
from proxy.pipeline.units import group_units, pinned_count
from proxy.shrinker import CompactMemo, Shrinker
from proxy.tokenizers import Tokenizers
from proxy.tokens import TokenCounter

WINDOWS = (16384, 8192, 4096)
TARGET = 0.02
MARKER_TOKENS = 32  # about what stage 2's "[shrink-proxy: N earlier messages ...]" costs
TOOL_MAX_TOKENS = (512, 1024, 2048)
TRIM_STEPS = (0.25, 0.5, 0.75, 1.0)


@dataclass
class Break:
    conversation: str
    turn: int  # index of the turn within the conversation (0 = first request)
    messages: int  # length of the unshrunk request
    cause: str
    cuts: tuple[int | None, int | None]  # stage 2's cut (input index) before and after
    position: int  # first differing message position in the previous shrunk request
    role: str | None


@dataclass
class Tally3:
    """Turns, breaks and token reuse of one strategy at one window."""

    turns: int = 0
    transitions: int = 0  # turns that have a previous turn
    breaks: int = 0
    reused: int = 0
    prompt: int = 0
    fits: int = 0
    log: list[Break] = field(default_factory=list)
    # Of the turns stage 2 trimmed: the share of the prompt budget each used, and where the
    # lowest was (a cut that moved deeper than it needed leaves most of a small budget unused).
    fills: list[float] = field(default_factory=list)
    lowest: str = ""

    @property
    def break_share(self) -> float:
        return self.breaks / self.transitions if self.transitions else 0.0

    @property
    def reuse_share(self) -> float:
        return self.reused / self.prompt if self.prompt else 0.0


class Renderer:
    """Per-message token lists of a plain chat rendering, cached by message content."""

    def __init__(self, counter: TokenCounter):
        if counter.encoding is None:
            raise SystemExit("bench.prefix needs a real tiktoken encoding")
        self.encoding = counter.encoding
        self.cache: dict[bytes, list[int]] = {}

    def tokens(self, message: Message) -> list[int]:
        key = orjson.dumps(message)
        out = self.cache.get(key)
        if out is None:
            text = f"<|{message.get('role')}|>\n{corpus.haystack([message])}\n"
            out = self.cache[key] = self.encoding.encode_ordinary(text)
        return out

    def common(self, prev: list[Message], cur: list[Message]) -> tuple[int, int | None]:
        """(tokens of the longest common prefix, first differing position in prev or None)."""
        n = 0
        for p, (a, b) in enumerate(zip(prev, cur, strict=False)):
            if a == b:
                n += len(self.tokens(a))
                continue
            ta, tb = self.tokens(a), self.tokens(b)
            k = 0
            while k < len(ta) and k < len(tb) and ta[k] == tb[k]:
                k += 1
            return n + k, p
        return n, None if len(prev) <= len(cur) else len(cur)

    def tools(self, tools: list[dict[str, Any]]) -> int:
        """Tool definitions come first in the prompt and never change within a conversation."""
        return len(self.encoding.encode_ordinary(json.dumps(tools))) if tools else 0

    def size(self, messages: list[Message]) -> int:
        return sum(len(self.tokens(m)) for m in messages)


def turns(conv: Conversation) -> list[list[Message]]:
    """The requests an agent sends: before every assistant message, then the whole thing."""
    ms = conv.messages
    out = [ms[:i] for i, m in enumerate(ms) if m.get("role") == "assistant" and i > 0]
    if not out or len(out[-1]) != len(ms):
        out.append(ms)
    return out


def stages(report: Report | None) -> tuple[int | None, bool]:
    """(stage 2's cut index or None, whether stage 3 cut anything) from a plan's report."""
    if report is None:
        return None, False
    cut = next((d.index for d in report.details if d.stage == "trim"), None)
    return cut, any(d.stage == "truncate" for d in report.details)


def cause(prev: Report | None, cur: Report | None) -> str:
    (cut_a, s3_a), (cut_b, s3_b) = stages(prev), stages(cur)
    if cut_a is None and cut_b is not None:
        return "trim began"
    if cut_a != cut_b:
        return "cut moved"
    if s3_a or s3_b:
        return "stage 3"
    return "other"


Plan = Callable[[dict[str, Any]], tuple[list[Message], bool, Report | None]]


def replay(convs: list[Conversation], plan: Plan, renderer: Renderer) -> Tally3:
    t = Tally3()
    for conv in convs:
        tools_tokens = renderer.tools(conv.tools)
        prev: list[Message] | None = None
        prev_report: Report | None = None
        for k, request in enumerate(turns(conv)):
            messages, fits, report = plan(conv.request(request))
            if report is not None and stages(report)[0] is not None and report.budget:
                fill = report.tokens_after / report.budget
                if not t.fills or fill < min(t.fills):
                    t.lowest = f"{conv.id} turn {k}: {report.tokens_after:,}/{report.budget:,}"
                t.fills.append(fill)
            t.turns += 1
            t.fits += fits
            t.prompt += tools_tokens + renderer.size(messages)
            if prev is not None:
                t.transitions += 1
                shared, position = renderer.common(prev, messages)
                t.reused += tools_tokens + shared
                if position is not None:
                    t.breaks += 1
                    t.log.append(
                        Break(
                            conv.id,
                            k,
                            len(request),
                            cause(prev_report, report),
                            (stages(prev_report)[0], stages(report)[0]),
                            position,
                            prev[position].get("role") if position < len(prev) else None,
                        )
                    )
            prev, prev_report = messages, report
    return t


def kept_tokens(ms: list[Message], counts: list[int], p: int, cut: int | None) -> int:
    """Tokens kept by a front cut at message `cut` (None: no cut), as stage 2 counts them."""
    if cut is None:
        return sum(counts)
    users = [i for i in range(p, cut) if ms[i].get("role") == "user"]
    carried = counts[users[-1]] if users and ms[cut].get("role") != "user" else 0
    return sum(counts[:p]) + carried + MARKER_TOKENS + sum(counts[cut:])


def fewest_breaks(convs: list[Conversation], sh: Shrinker) -> tuple[int, int]:
    """(breaks, transitions) of the best any rule that drops whole units from the front could do
    after stage 1: at each forced move, cut as deep as `keep_last` allows (greedy is optimal: a
    deeper cut keeps less at every later turn). The carried user message and the marker are
    counted as the pipeline counts them, the marker at a fixed MARKER_TOKENS."""
    breaks = transitions = 0
    for conv in convs:
        cut: int | None = None
        for k, request in enumerate(turns(conv)):
            body = conv.request(request)
            plan = sh.plan_sync(body, "tools")
            counter = sh.tokenizers.for_model(corpus.MODEL)
            room = plan.report.budget - counter.count_tools(body.get("tools")) - REPLY_PRIMING
            ms = plan.messages
            counts = [counter.count_message(m) for m in ms]
            p = pinned_count(ms)

            if kept_tokens(ms, counts, p, cut) > room:
                limit = len(ms) - sh.policy.keep_last
                starts = [b for b, _ in group_units(ms, p)[1:] if b <= limit]
                deepest = max(starts, default=cut)
                if deepest is not None and deepest != cut:
                    cut = deepest
                    breaks += k > 0
            transitions += k > 0
    return breaks, transitions


def ours_plan(sh: Shrinker) -> Plan:
    def run(body: dict[str, Any]) -> tuple[list[Message], bool, Report | None]:
        p = sh.plan_sync(body, "auto")
        return p.messages, p.report.fits, p.report

    return run


def seed_plan_fn(window: int, tokenizers: Tokenizers) -> Plan:
    settings = corpus.settings(context_window=window)

    def run(body: dict[str, Any]) -> tuple[list[Message], bool, Report | None]:
        p = seed_plan(body, settings, tokenizers)
        return p.messages, p.fits, None

    return run


def raw_plan(body: dict[str, Any]) -> tuple[list[Message], bool, Report | None]:
    return body["messages"], False, None


def summary(name: str, t: Tally3) -> str:
    mark = "" if name != "ours" else ("  (target met)" if t.break_share <= TARGET else "  (MISS)")
    return (
        f"  {name:<5} turns {t.turns}, breaks {t.breaks}/{t.transitions} "
        f"({t.break_share:.1%}){mark}; reuse {t.reused:,}/{t.prompt:,} tokens "
        f"({t.reuse_share:.1%}); fit {t.fits}/{t.turns}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    parser.add_argument("--sweep", action="store_true", help="also tool_max_tokens x trim_step")
    parser.add_argument("--verbose", action="store_true", help="list every break of ours")
    args, overrides, convs, tokenizers = corpus.start(parser)
    counter = tokenizers.for_model(corpus.MODEL)
    renderer = Renderer(counter)
    n_turns = sum(len(turns(c)) for c in convs)
    print(
        f"corpus: {args.dir or corpus.DEFAULT_DIR} ({len(convs)} conversations, "
        f"{n_turns} turns); target: at most {TARGET:.0%} of turns break"
    )
    raw: dict[str, Any] = {"windows": {}}
    for window in args.windows:
        sh = Shrinker(corpus.settings(context_window=window, **overrides), tokenizers)
        results = {
            "ours": replay(convs, ours_plan(sh), renderer),
            "seed": replay(convs, seed_plan_fn(window, tokenizers), renderer),
            "raw": replay(convs, raw_plan, renderer),
        }
        print(f"\n=== window {window:,} ({args.set or 'default settings'}) ===")
        for name, t in results.items():
            print(summary(name, t))
        fills = results["ours"].fills
        if fills:
            print(
                f"  ours fill of the budget on {len(fills)} trimmed turns: mean "
                f"{sum(fills) / len(fills):.0%}, lowest {min(fills):.0%} "
                f"({results['ours'].lowest})"
            )
        low, n = fewest_breaks(convs, sh)
        print(
            f"  bound fewest breaks any front-cut rule could reach after stage 1: {low}/{n} "
            f"({low / n:.1%})"
        )
        log = results["ours"].log
        causes = Tally(b.cause for b in log)
        print(
            "  ours breaks by cause: "
            + (", ".join(f"{c} {n}" for c, n in causes.items()) or "none")
        )
        per_conv = Tally(b.conversation for b in log)
        if per_conv:
            print(
                "  ours breaks by conversation: "
                + ", ".join(f"{c} {n}" for c, n in sorted(per_conv.items()))
            )
        if args.verbose:
            for b in log:
                print(
                    f"    {b.conversation} turn {b.turn} ({b.messages} msgs): {b.cause} "
                    f"(cut {b.cuts[0]} -> {b.cuts[1]}), first change at position "
                    f"{b.position} ({b.role})"
                )
        raw["windows"][str(window)] = {
            **{
                name: {**asdict(t), "break_share": t.break_share, "reuse_share": t.reuse_share}
                for name, t in results.items()
            },
            "fewest_breaks": low,
        }
    if args.sweep:
        memo = CompactMemo(1 << 16)
        print("\n=== sweep: breaks (share of turns) and reuse, ours ===")
        print(f"{'tmt':>5}{'step':>6}" + "".join(f"{f'window {w:,}':>30}" for w in args.windows))
        raw["sweep"] = []
        for tmt, step in itertools.product(TOOL_MAX_TOKENS, TRIM_STEPS):
            cells = []
            for window in args.windows:
                s = corpus.settings(context_window=window, tool_max_tokens=tmt, trim_step=step)
                sh = Shrinker(s, tokenizers)
                sh.memo = memo
                t = replay(convs, ours_plan(sh), renderer)
                cells.append(f"{t.breaks:>3} ({t.break_share:5.1%}) reuse {t.reuse_share:5.1%}")
                raw["sweep"].append(
                    {
                        "tool_max_tokens": tmt,
                        "trim_step": step,
                        "window": window,
                        "breaks": t.breaks,
                        "transitions": t.transitions,
                        "break_share": t.break_share,
                        "reuse_share": t.reuse_share,
                    }
                )
            print(f"{tmt:>5}{step:>6}" + "".join(f"{c:>30}" for c in cells))
    corpus.write_json(args.json, raw)


if __name__ == "__main__":
    main()
