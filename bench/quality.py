"""Tokens saved and needles kept by the whole pipeline, against the seed baseline, per window.

    .venv/bin/python -m bench.quality [DIR]
        [--json FILE] [--no-sweep]

Each conversation is sent as one request (its messages and tools, model `qwen2.5-coder`, so
cl100k_base) through the real `Shrinker` at 16k, 8k and 4k windows with the default settings,
and through the seed baseline (bench/baseline.py) with the same budget. A needle is kept when its
answer is still a substring of a message content or tool-call argument of the shrunk request.
A lost needle is blamed on stage 1 when the tools-only mode already loses it, else on trimming.

The sweep reruns the pipeline over `tool_max_tokens` x `trim_step` so defaults can be chosen by
measurement: the best configuration keeps every critical and recent needle and saves the most.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import corpus
from bench.baseline import seed_plan
from bench.corpus import CLASSES, Conversation
from proxy.shrinker import CompactMemo, Shrinker
from proxy.tokenizers import Tokenizers

WINDOWS = (16384, 8192, 4096)
TOOL_MAX_TOKENS = (256, 512, 1024, 2048)
TRIM_STEPS = (0.25, 0.5, 0.75)
MUST_KEEP = ("critical", "recent")


@dataclass
class Row:
    """One conversation at one window, for one strategy."""

    id: str
    before: int
    after: int
    fits: bool
    pairing_ok: bool
    kept: dict[str, int]
    total: dict[str, int]
    lost: list[str] = field(default_factory=list)


@dataclass
class Totals:
    saved: int = 0
    before: int = 0
    fits: int = 0
    conversations: int = 0
    pairing_ok: int = 0
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))

    def add(self, row: Row) -> None:
        self.saved += row.before - row.after
        self.before += row.before
        self.fits += row.fits
        self.conversations += 1
        self.pairing_ok += row.pairing_ok
        for c in CLASSES:
            self.kept[c] += row.kept[c]
            self.total[c] += row.total[c]

    def keeps_all(self, classes: Iterable[str] = MUST_KEEP) -> bool:
        return all(self.kept[c] == self.total[c] for c in classes)


def score(conv: Conversation, messages: list[dict[str, Any]]) -> tuple[dict[str, int], list[Any]]:
    """Needles kept per class, and the needles lost."""
    hay = corpus.haystack(messages)
    kept = dict.fromkeys(CLASSES, 0)
    lost = []
    for n in conv.needles:
        if n.answer in hay:
            kept[n.cls] = kept.get(n.cls, 0) + 1
        else:
            lost.append(n)
    return kept, lost


def class_totals(conv: Conversation) -> dict[str, int]:
    total = dict.fromkeys(CLASSES, 0)
    for n in conv.needles:
        total[n.cls] = total.get(n.cls, 0) + 1
    return total


def shrinker(tokenizers: Tokenizers, memo: CompactMemo, **overrides: Any) -> Shrinker:
    """The real edge object; one shared stage-1 memo (keyed by limit) keeps the sweep cheap."""
    s = Shrinker(corpus.settings(**overrides), tokenizers)
    s.memo = memo
    return s


def ours(conv: Conversation, sh: Shrinker, blame: bool) -> Row:
    body = conv.request()
    plan = sh.plan_sync(body, "auto")
    kept, lost = score(conv, plan.messages)
    why: list[str] = []
    if blame and lost:
        tools_only = corpus.haystack(sh.plan_sync(body, "tools").messages)
        for n in lost:
            stage = "stage 1" if n.answer not in tools_only else "trim"
            why.append(f"{n.cls} #{n.message_index} ({stage}): {n.answer[:60]!r}")
    r = plan.report
    return Row(
        conv.id,
        r.tokens_before,
        r.tokens_after,
        r.fits,
        corpus.pairing_ok(plan.messages),
        kept,
        class_totals(conv),
        why,
    )


def seed(conv: Conversation, window: int, tokenizers: Tokenizers) -> Row:
    plan = seed_plan(conv.request(), corpus.settings(context_window=window), tokenizers)
    kept, lost = score(conv, plan.messages)
    return Row(
        conv.id,
        plan.tokens_before,
        plan.tokens_after,
        plan.fits,
        corpus.pairing_ok(plan.messages),
        kept,
        class_totals(conv),
        [f"{n.cls} #{n.message_index}: {n.answer[:60]!r}" for n in lost],
    )


def kept_cell(row: Row | Totals, cls: str) -> str:
    return f"{row.kept[cls]}/{row.total[cls]}"


def print_window(
    window: int, rows_ours: list[Row], rows_seed: list[Row], overrides: list[str]
) -> None:
    print(f"\n=== window {window:,} ({overrides or 'default settings'}) ===")
    head = (
        f"{'conversation':<40}{'before':>8}{'ours':>8}{'fit':>4}{'seed':>8}{'fit':>4}"
        f"  {'crit o/s':>11}{'inc o/s':>11}{'rec o/s':>9}"
    )
    print(head)
    t_ours, t_seed = Totals(), Totals()
    for o, s in zip(rows_ours, rows_seed, strict=True):
        t_ours.add(o)
        t_seed.add(s)
        cells = "".join(
            f"{kept_cell(o, c) + ' ' + kept_cell(s, c):>{w}}"
            for c, w in zip(CLASSES, (11, 11, 9), strict=True)
        )
        print(
            f"{o.id[:39]:<40}{o.before:>8,}{o.after:>8,}{'y' if o.fits else 'N':>4}"
            f"{s.after:>8,}{'y' if s.fits else 'N':>4}  {cells}"
        )
    for name, t in (("ours", t_ours), ("seed", t_seed)):
        kept = "  ".join(f"{c} {kept_cell(t, c)}" for c in CLASSES)
        print(
            f"  {name}: saved {t.saved:,} of {t.before:,} tokens ({t.saved / t.before:.1%}); "
            f"fit {t.fits}/{t.conversations}; valid pairing {t.pairing_ok}/{t.conversations}; "
            f"{kept}"
        )
    for name, rows in (("ours", rows_ours), ("seed", rows_seed)):
        lost = [f"{r.id}: {item}" for r in rows for item in r.lost]
        print(f"  {name} lost {len(lost)} needles" + (":" if lost else ""))
        for item in lost:
            print(f"    {item}")


def sweep(
    convs: list[Conversation], tokenizers: Tokenizers, memo: CompactMemo, windows: tuple[int, ...]
) -> dict[tuple[int, float, int], Totals]:
    results: dict[tuple[int, float, int], Totals] = {}
    for tmt, step, window in itertools.product(TOOL_MAX_TOKENS, TRIM_STEPS, windows):
        sh = shrinker(tokenizers, memo, context_window=window, tool_max_tokens=tmt, trim_step=step)
        t = Totals()
        for conv in convs:
            t.add(ours(conv, sh, blame=False))
        results[(tmt, step, window)] = t
    return results


def print_sweep(
    results: dict[tuple[int, float, int], Totals], windows: tuple[int, ...]
) -> dict[str, Any]:
    print("\n=== sweep: tool_max_tokens x trim_step (saved tokens; needles crit/inc/rec) ===")
    print(f"{'tmt':>5}{'step':>6}" + "".join(f"{f'window {w:,}':>44}" for w in windows))
    configs = sorted({(t, s) for t, s, _ in results})
    for tmt, step in configs:
        cells = []
        for w in windows:
            t = results[(tmt, step, w)]
            cells.append(
                f"{t.saved:>9,} fit {t.fits:>2}/{t.conversations} "
                + " ".join(kept_cell(t, c) for c in CLASSES)
            )
        print(f"{tmt:>5}{step:>6}" + "".join(f"{c:>44}" for c in cells))

    def pick(keys: list[tuple[int, float]], over: tuple[int, ...]) -> dict[str, Any]:
        """Among configs keeping every critical+recent needle, the one saving most; if none
        does, the one keeping the most of them (then saving most)."""

        def merged(k: tuple[int, float]) -> Totals:
            t = Totals()
            for w in over:
                r = results[(*k, w)]
                t.saved += r.saved
                t.fits += r.fits
                for c in CLASSES:
                    t.kept[c] += r.kept[c]
                    t.total[c] += r.total[c]
            return t

        ok = [k for k in keys if merged(k).keeps_all()]
        if ok:
            # Ties (the same cuts) go to the larger step: its cuts move less often.
            best = max(ok, key=lambda k: (merged(k).saved, merged(k).fits, k[1]))
            rule = "keeps every critical and recent needle, saves most"
        else:
            best = max(
                keys,
                key=lambda k: (sum(merged(k).kept[c] for c in MUST_KEEP), merged(k).saved, k[1]),
            )
            rule = "no config keeps every critical+recent needle; most kept, then most saved"
        t = merged(best)
        print(
            f"  best at {'+'.join(f'{w:,}' for w in over)}: tool_max_tokens={best[0]}, "
            f"trim_step={best[1]} ({rule}): saved {t.saved:,}, fit {t.fits}, "
            + " ".join(f"{c} {kept_cell(t, c)}" for c in CLASSES)
            + f"; qualifying: {len(ok)}/{len(keys)}"
        )
        return {
            "windows": list(over),
            "tool_max_tokens": best[0],
            "trim_step": best[1],
            "rule": rule,
            "qualifying": [list(k) for k in ok],
        }

    return {
        "per_window": [pick(configs, (w,)) for w in windows],
        "all_windows": pick(configs, windows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    parser.add_argument("--no-sweep", action="store_true", help="default settings only")
    args, overrides, convs, tokenizers = corpus.start(parser)
    memo = CompactMemo(1 << 16)
    print(
        f"corpus: {args.dir or corpus.DEFAULT_DIR} ({len(convs)} conversations), "
        f"model {corpus.MODEL} -> {tokenizers.for_model(corpus.MODEL).name}"
    )
    raw: dict[str, Any] = {"windows": {}}
    for window in args.windows:
        sh = shrinker(tokenizers, memo, context_window=window, **overrides)
        rows_ours = [ours(c, sh, blame=True) for c in convs]
        rows_seed = [seed(c, window, tokenizers) for c in convs]
        print_window(window, rows_ours, rows_seed, args.set)
        raw["windows"][str(window)] = {
            "ours": [asdict(r) for r in rows_ours],
            "seed": [asdict(r) for r in rows_seed],
        }
    if not args.no_sweep:
        results = sweep(convs, tokenizers, memo, tuple(args.windows))
        raw["sweep"] = [
            {"tool_max_tokens": t, "trim_step": s, "window": w, **asdict(v)}
            for (t, s, w), v in results.items()
        ]
        raw["best"] = print_sweep(results, tuple(args.windows))
    corpus.write_json(args.json, raw)


if __name__ == "__main__":
    main()
