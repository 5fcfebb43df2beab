"""Stage 1 on toolchains the dev corpus does not hold: does each log keep its needles?

Usage: python -m bench.toolchains [--seeds N]

The logs (Go, Rust, Jest, Mocha, Maven, Gradle, TypeScript, ESLint, .NET, Terraform, Docker,
git; tests/pipeline/ecosystems.py) are generated with N seeds each and compacted at the budgets of
bench/compact_eval.py; the seed's 20+20 lines and a budget-matched head+tail cut are scored on the
same logs. A check on generality, not a target: quality is also measured on unseen conversations.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken-cache"))

import tiktoken  # noqa: E402

from bench.compact_eval import BUDGETS, budget_baseline, seed_baseline  # noqa: E402
from proxy.pipeline.compact import compact_text  # noqa: E402
from tests.pipeline.ecosystems import GENERATORS, logs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
