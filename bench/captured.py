"""Stage 1 and the facts on real program output captured outside the dev corpus.

    .venv/bin/python -m bench.captured [-v]

bench/captured/ holds 30 outputs captured by running real tools on this project's machines
(npm, tsc, Jest, ESLint, mocha, webpack, node; pip, mypy, flake8, pytest, sphinx, Python
tracebacks and profiles; cargo, gcc/make/cmake, go test, valgrind, strace, apt, java, git),
combined stdout+stderr as an agent's tool returns it, paths scrubbed to /home/user. Each has
needles chosen before any compaction was looked at (cases.json: `critical` for errors, failing
tests, verdicts and key versions, `incidental` for one fact from the middle). None of them shaped
a rule before it was measured here, but later rules were checked against them: read the figures
as a second view beside the dev corpus, not as a holdout.

For each budget: needles still in the compacted text, ours against the seed's 20+20 lines and a
head+tail cut of the same budget. Then the facts: needles among an output's first five key lines
(about what the trim marker lists for one dropped output at an 8k window).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import corpus  # noqa: E402
from bench.compact_eval import budget_baseline, seed_baseline  # noqa: E402
from proxy.pipeline.compact import compact_text  # noqa: E402
from proxy.pipeline.facts import extract_facts, normalise  # noqa: E402

DIR = ROOT / "bench" / "captured"
BUDGETS = (409, 1024)
CLASSES = ("critical", "incidental")
FACTS = 5


def load(directory: Path = DIR) -> list[tuple[dict[str, Any], str]]:
    """(case, text) for every captured output."""
    cases = json.loads((directory / "cases.json").read_text())
    return [
        (case, gzip.decompress((directory / f"{case['id']}.txt.gz").read_bytes()).decode())
        for case in cases
    ]


def score(outputs: list[tuple[dict[str, Any], str]]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Kept needles per "budget method" row and class (plus a "total" per class), and the
    critical needles ours lost, as "id @budget: answer"."""
    corpus.setup_environment()
    count = corpus.tokenizers().for_model(corpus.MODEL).count_text
    kept: dict[str, dict[str, int]] = {"total": dict.fromkeys(CLASSES, 0)}
    lost: list[str] = []

    def add(row: str, case: dict[str, Any], text: str, budget: int | None) -> None:
        cells = kept.setdefault(row, dict.fromkeys(CLASSES, 0))
        for needle in case["needles"]:
            found = needle["answer"] in text
            cells[needle["class"]] += found
            if row.endswith(" ours") and not found and needle["class"] == "critical":
                lost.append(f"{case['id']} @{budget}: {needle['answer'][:90]}")

    for case, text in outputs:
        for needle in case["needles"]:
            kept["total"][needle["class"]] += 1
        for budget in BUDGETS:
            done = compact_text(text, budget, count)
            add(f"{budget} ours", case, text if done is None else done.text, budget)
            add(f"{budget} seed 20+20", case, seed_baseline(text, count), budget)
            add(f"{budget} head+tail", case, budget_baseline(text, budget, count), budget)
        facts = extract_facts([{"role": "tool", "tool_call_id": "c", "content": text}])[:FACTS]
        listed = normalise("\n".join(facts))
        cells = kept.setdefault("facts", dict.fromkeys(CLASSES, 0))
        for needle in case["needles"]:
            cells[needle["class"]] += normalise(needle["answer"]) in listed
    return kept, lost


def main() -> None:
    outputs = load()
    kept, lost = score(outputs)
    total = kept.pop("total")
    print(
        f"captured: {len(outputs)} real outputs in {DIR.relative_to(ROOT)}, "
        f"{total['critical']} critical and {total['incidental']} incidental needles"
    )
    print(f"{'':20} {'critical':>10} {'incidental':>11}")
    for row, cells in kept.items():
        name = f"first {FACTS} facts" if row == "facts" else row
        print(
            f"{name:20} {cells['critical']:>4}/{total['critical']:<5}"
            f" {cells['incidental']:>4}/{total['incidental']:<6}"
        )
    if "-v" in sys.argv[1:]:
        print("critical needles lost by stage 1:")
        for line in lost:
            print("  " + line)


if __name__ == "__main__":
    main()
