"""Needle retention and token savings of tool-result compaction over the evaluation corpus.

Usage: python bench/compact_eval.py [CORPUS_DIR]
(CORPUS_DIR defaults to ../shared/corpus/dev beside the project root: tests/shared_dir.py.)

For each budget, every tool message above it is compacted; a needle of class critical/incidental
whose message is a tool message counts as kept when its answer is still a substring. Two baselines
run in the same pass: the seed's rule (over 800 tokens keep 20 head + 20 tail lines, whatever the
budget) and head+tail lines filling the same budget (half each).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.shared_dir import DEV_CORPUS, use_offline_encodings  # noqa: E402

use_offline_encodings()

import tiktoken  # noqa: E402

from proxy.pipeline.compact import compact_text  # noqa: E402

BUDGETS = (409, 512, 1024, 2048)  # 409: the cap at an 8k window (window / 20)
CLASSES = ("critical", "incidental")


def seed_baseline(text: str, count: Callable[[str], int]) -> str:
    lines = text.split("\n")
    if count(text) <= 800 or len(lines) <= 40:
        return text
    return "\n".join(lines[:20] + [f"[... {len(lines) - 40} lines omitted ...]"] + lines[-20:])


def budget_baseline(text: str, budget: int, count: Callable[[str], int]) -> str:
    """Head and tail lines, half the budget each (a line-count-blind but budget-matched cut)."""
    if count(text) <= budget:
        return text
    lines = text.split("\n")
    costs = [count(line) + 1 for line in lines]
    half = (budget - 20) / 2
    head, spent = 0, 0
    while head < len(lines) and spent + costs[head] <= half:
        spent += costs[head]
        head += 1
    tail, spent = 0, 0
    while tail < len(lines) - head and spent + costs[-1 - tail] <= half:
        spent += costs[-1 - tail]
        tail += 1
    kept = lines[:head] + ["[... lines omitted ...]"] + (lines[len(lines) - tail :] if tail else [])
    return "\n".join(kept)


def main() -> None:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEV_CORPUS
    enc = tiktoken.get_encoding("cl100k_base")

    def count(s: str) -> int:
        return len(enc.encode(s, disallowed_special=()))

    convs = [json.loads(p.read_text()) for p in sorted(corpus.glob("*.json"))]
    tools = [
        (c["id"], i, m["content"])
        for c in convs
        for i, m in enumerate(c["messages"])
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]
    before = sum(count(t) for _, _, t in tools)
    seed = {(cid, i): seed_baseline(t, count) for cid, i, t in tools}
    print(f"corpus: {corpus}  conversations: {len(convs)}  tool messages: {len(tools)}")
    print(
        f"tool tokens before: {before:,}   seed 20+20 after: "
        f"{sum(count(t) for t in seed.values()):,}"
    )
    for budget in BUDGETS:
        ours, matched = {}, {}
        for cid, i, text in tools:
            r = compact_text(text, budget, count)
            ours[(cid, i)] = text if r is None else r.text
            matched[(cid, i)] = budget_baseline(text, budget, count)
        after = sum(count(t) for t in ours.values())
        after_matched = sum(count(t) for t in matched.values())
        print(f"\nbudget {budget}: tool tokens after: ours {after:,}  head+tail {after_matched:,}")
        for cls in CLASSES:
            row = {"ours": 0, "head+tail": 0, "seed 20+20": 0}
            total = 0
            lost = []
            for c in convs:
                for n in c["needles"]:
                    key = (c["id"], n["message_index"])
                    if n["class"] != cls or key not in ours:
                        continue
                    total += 1
                    for name, table in (
                        ("ours", ours),
                        ("head+tail", matched),
                        ("seed 20+20", seed),
                    ):
                        row[name] += n["answer"] in table[key]
                    if n["answer"] not in ours[key]:
                        lost.append(f"{c['id']}#{n['message_index']}: {n['answer'][:70]!r}")
            figures = "  ".join(f"{k} {v}/{total}" for k, v in row.items())
            print(f"  {cls:<10} {figures}")
            for item in lost:
                print(f"      lost: {item}")
    cid, i, largest = max(tools, key=lambda t: len(t[2]))
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        compact_text(largest, 1024, count)
        runs.append(time.perf_counter() - t0)
    print(
        f"\nlargest tool output {cid}#{i}: {count(largest):,} tokens, compact to 1024: "
        f"best {min(runs) * 1e3:.1f} ms, median {sorted(runs)[2] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
