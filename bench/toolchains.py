"""Toolchains the dev corpus does not hold: does each log keep its needles, in stage 1 and
once trimming drops it?

Usage: python -m bench.toolchains [--seeds N]

The logs (Go, Rust, Jest, Mocha, Maven, Gradle, TypeScript, ESLint, .NET, Terraform, Docker,
git, Valgrind (seen once in the dev corpus, in a short run), unittest, CTest, RSpec,
AddressSanitizer, CMake, apt, and two JSON listings; tests/pipeline/ecosystems.py) are generated
with N seeds each.

Stage 1: each log compacted at the budgets of bench/compact_eval.py; the seed's 20+20 lines and a
budget-matched head+tail cut are scored on the same logs.

Trimmed: each log is the result of an agent's first command, followed by enough plain turns that
the real `Shrinker` (default settings, 8k and 16k windows) drops it; its needles are looked for in
the shrunk request (so in the facts listed under the trim marker). Scored only where the log was
in fact dropped. A check on generality, not a target: quality is also measured on unseen
conversations.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.shared_dir import use_offline_encodings  # noqa: E402

use_offline_encodings()

import tiktoken  # noqa: E402

from bench import corpus  # noqa: E402
from bench.compact_eval import BUDGETS, budget_baseline, seed_baseline  # noqa: E402
from proxy.pipeline.compact import compact_text  # noqa: E402
from proxy.shrinker import Shrinker  # noqa: E402
from tests.pipeline.ecosystems import GENERATORS, Log, logs  # noqa: E402

TRIM_WINDOWS = (8192, 16384)
_PROSE = (
    "the next step is to look at how the request flows through the handler and which part of "
    "the state is shared between the workers before we change anything else in this area"
).split()


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_PROSE) for _ in range(words))


def trimmed_conversation(log: Log, window: int, seed: int) -> list[dict[str, Any]]:
    """The log as the first command's result, then plain turns worth two windows, then a
    question: the trim must drop the log; what it keeps of it is the facts under its marker."""
    rng = random.Random(f"{seed}:{log.name}:{window}")
    call = {"id": "call_0", "type": "function"}
    call["function"] = {"name": "run_command", "arguments": json.dumps({"command": log.name})}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Run the checks and tell me what failed."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": log.text},
        {"role": "assistant", "content": "The run finished; looking into it."},
    ]
    for _ in range(2 * window // 600):
        messages.append({"role": "user", "content": _prose(rng, 200)})
        messages.append({"role": "assistant", "content": _prose(rng, 200)})
    messages.append({"role": "user", "content": "What exactly failed in the first run?"})
    return messages


def trimmed(runs: list[tuple[int, Log]]) -> None:
    tokenizers = corpus.tokenizers()
    print("\ntrimmed: needles of a dropped log still in the request (facts under the marker)")
    print(f"{'window':>7} {'needles kept':>13} {'logs dropped':>13}  missed in")
    for window in TRIM_WINDOWS:
        shrinker = Shrinker(corpus.settings(context_window=window), tokenizers)
        kept = total = dropped = 0
        missed: dict[str, int] = {}
        for seed, log in runs:
            messages = trimmed_conversation(log, window, seed)
            body = {"model": corpus.MODEL, "messages": messages}
            out = shrinker.plan_sync(body, "auto").messages
            if any(m.get("tool_call_id") == "call_0" for m in out):
                continue  # not dropped: stage 1 scores it
            dropped += 1
            hay = corpus.haystack(out)
            for needle in log.needles:
                total += 1
                if " ".join(needle.split()) in " ".join(hay.split()):
                    kept += 1
                else:
                    missed[log.name] = missed.get(log.name, 0) + 1
        where = ", ".join(f"{name} {n}" for name, n in sorted(missed.items())) or "-"
        print(f"{window:>7} {kept:>6}/{total:<6} {dropped:>6}/{len(runs):<6}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    corpus.setup_environment()
    enc = tiktoken.get_encoding("cl100k_base")

    def count(s: str) -> int:
        return len(enc.encode_ordinary(s))

    runs = [log for seed in range(args.seeds) for log in logs(seed)]
    before = sum(count(log.text) for log in runs)
    print(f"{len(GENERATORS)} toolchains x {args.seeds} seeds, {before:,} tokens of tool output")
    print(f"{'budget':>7} {'method':<10} {'needles kept':>13} {'tokens after':>13}  missed in")
    for budget in BUDGETS:
        for method in ("ours", "seed", "head+tail"):
            kept = total = after = 0
            missed: dict[str, int] = {}
            for log in runs:
                if method == "ours":
                    done = compact_text(log.text, budget, count)
                    out = log.text if done is None else done.text
                elif method == "seed":
                    out = seed_baseline(log.text, count)
                else:
                    out = budget_baseline(log.text, budget, count)
                after += count(out)
                for needle in log.needles:
                    total += 1
                    if needle in out:
                        kept += 1
                    else:
                        missed[log.name] = missed.get(log.name, 0) + 1
            where = ", ".join(f"{name} {n}" for name, n in sorted(missed.items())) or "-"
            print(f"{budget:>7} {method:<10} {kept:>6}/{total:<6} {after:>13,}  {where}")
    trimmed([(seed, log) for seed in range(args.seeds) for log in logs(seed)])


if __name__ == "__main__":
    main()
