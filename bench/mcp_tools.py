"""The MCP server's run_compact_command on real tool outputs, against the seed rule (issue 24).

    .venv/bin/python -m bench.mcp_tools [DIR] [--profile full|smoke] [--json FILE]

Every tool output of the dev corpus (needles on tool messages) and of bench/captured is written
to a file and replayed through `run_compact_command` as `cat FILE`, by the official MCP SDK's
client against a real `python -m proxy mcp` subprocess over stdio: exactly what an agent gets.
Needles (bench.corpus's and bench.captured's own, loaded by their loaders) are counted in the
compacted output against the seed rule (over 800 tokens, 20 head + 20 tail lines: the rule of
mcp-headroom's run_compact_command) at the same output size: each output is asked for with
`max_tokens` equal to what the seed leaves of it. Then at the tool's default cap (1,024).
Overhead per call: the client's round trip less the command's own run (`duration_s`), and a
bare `cat` of the same file by subprocess, measured in the same run. Memory: 500 MiB of output
through the tool, the server's peak RSS (Linux /proc). Exits 1 when the tool keeps
fewer critical needles than the seed at the same size. (Named mcp_tools, not mcp: run as a
script from bench/, a bench/mcp.py would shadow the SDK's own `mcp` package.)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from bench import captured, corpus  # noqa: E402
from bench.compact_eval import seed_baseline  # noqa: E402
from tests.mcp_client import call, stdio_session  # noqa: E402

CLASSES = ("critical", "incidental")
PROFILES = {"full": 20, "smoke": 5}  # overhead calls per size


@dataclass(frozen=True)
class Case:
    name: str  # "dev-03#12" or a captured id
    text: str
    needles: tuple[tuple[str, str], ...]  # (class, answer)


def cases(directory: str | None) -> list[Case]:
    """Tool outputs with needles: the corpus's tool messages, then bench/captured's outputs."""
    out = []
    for conv in corpus.load(directory):
        for i, m in enumerate(conv.messages):
            if m.get("role") != "tool" or not isinstance(m.get("content"), str):
                continue
            found = tuple(
                (n.cls, n.answer) for n in conv.needles if n.message_index == i and n.cls in CLASSES
            )
            out.append(Case(f"{conv.id}#{i}", m["content"], found))
    for case, text in captured.load():
        found = tuple((n["class"], n["answer"]) for n in case["needles"] if n["class"] in CLASSES)
        out.append(Case(case["id"], text, found))
    return out


def kept(case: Case, text: str) -> dict[str, int]:
    cells = dict.fromkeys(CLASSES, 0)
    for cls, answer in case.needles:
        cells[cls] += answer in text
    return cells


async def replay(all_cases: list[Case], folder: Path, calls: int) -> dict[str, Any]:
    count = corpus.tokenizers().for_model(corpus.MODEL).count_text
    rows: dict[str, dict[str, int]] = {
        row: dict.fromkeys(("critical", "incidental", "tokens"), 0)
        for row in ("input", "seed 20+20", "ours, same size", "ours, default cap")
    }
    lost: list[str] = []
    overhead: list[dict[str, Any]] = []
    async with stdio_session(folder) as session:
        for i, case in enumerate(all_cases):
            path = folder / f"out-{i:03d}.txt"
            path.write_text(case.text, encoding="utf-8")
            seed = seed_baseline(case.text, count)
            # The tool's smallest cap is 64 tokens; the seed leaves less only of an output it did
            # not cut (under 800 tokens), which a cap of 64 or more does not cut either.
            size = max(64, count(seed))
            _, same = await call(
                session, "run_compact_command", command=["cat", path.name], max_tokens=size
            )
            _, default = await call(session, "run_compact_command", command=["cat", path.name])
            for row, text in (
                ("input", case.text),
                ("seed 20+20", seed),
                ("ours, same size", same["output"]),
                ("ours, default cap", default["output"]),
            ):
                cells = rows[row]
                for cls, n in kept(case, text).items():
                    cells[cls] += n
                cells["tokens"] += count(text)
            for cls, answer in case.needles:
                if answer not in same["output"] and answer in seed:
                    lost.append(f"{case.name} ({cls}): {answer[:80]}")
        largest = max(range(len(all_cases)), key=lambda k: len(all_cases[k].text))
        (folder / "small.txt").write_text("hello\n")
        for name, file in (("small (6 bytes)", "small.txt"), ("largest", f"out-{largest:03d}.txt")):
            tool, inside = [], []
            for _ in range(calls):
                began = time.perf_counter()
                _, out = await call(session, "run_compact_command", command=["cat", file])
                tool.append(time.perf_counter() - began - out["duration_s"])
                inside.append(out["overhead_s"])
            overhead.append(
                {
                    "output": name,
                    "file": file,
                    "bytes": (folder / file).stat().st_size,
                    "round_trip_less_command_ms": statistics.median(tool) * 1e3,
                    "in_server_ms": statistics.median(inside) * 1e3,
                }
            )
        memory = await flood(session, folder)
    return {"rows": rows, "lost_vs_seed": lost, "overhead": overhead, "memory": memory}


FLOOD = (
    "import sys\n"
    "block = (b'y' * 1023 + b'\\n') * 64\n"
    "for _ in range(8000): sys.stdout.buffer.write(block)\n"  # 8000 x 64 KiB = 500 MiB
)


async def flood(session: Any, folder: Path) -> dict[str, Any]:
    """500 MiB of output through the tool: the server's resident memory before, and its peak
    (VmHWM) after; the default SHRINK_MCP_OUTPUT_MAX_BYTES holds 8 MiB of it."""
    _, me = await call(
        session,
        "run_compact_command",
        command=[sys.executable, "-c", "import os; print(os.getppid())"],
    )
    pid = int(me["output"])
    before = _status(pid, "VmRSS:")
    (folder / "flood.py").write_text(FLOOD)
    began = time.perf_counter()
    _, out = await call(session, "run_compact_command", command=[sys.executable, "flood.py"])
    return {
        "bytes": out["bytes"],
        "held": out["bytes"] - out["omitted_bytes"],
        "seconds": time.perf_counter() - began,
        "rss_before_mb": before / 2**20,
        "peak_rss_mb": _status(pid, "VmHWM:") / 2**20,
        "tokens_after": out["tokens_after"],
    }


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {key} for {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.mcp_tools")
    parser.add_argument("dir", nargs="?", default=None, help="corpus dir (default: shared dev)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    args = parser.parse_args()
    corpus.setup_environment()
    all_cases = cases(args.dir)
    totals = {cls: sum(c == cls for case in all_cases for c, _ in case.needles) for cls in CLASSES}
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        figures = anyio.run(replay, all_cases, Path(tmp), PROFILES[args.profile])
        elapsed = time.perf_counter() - began
        for o in figures["overhead"]:  # the same file by a bare subprocess, for scale
            bare = []
            for _ in range(PROFILES[args.profile]):
                began = time.perf_counter()
                subprocess.run(["cat", Path(tmp) / o["file"]], capture_output=True, check=True)
                bare.append(time.perf_counter() - began)
            o["bare_cat_ms"] = statistics.median(bare) * 1e3
    rows = figures["rows"]
    print(
        f"mcp run_compact_command: {len(all_cases)} tool outputs replayed with cat over stdio "
        f"(dev corpus + bench/captured), {totals['critical']} critical and "
        f"{totals['incidental']} incidental needles; {elapsed:.1f} s"
    )
    print(f"{'':20} {'critical':>10} {'incidental':>11} {'tokens':>10}")
    for row, cells in rows.items():
        print(
            f"{row:20} {cells['critical']:>4}/{totals['critical']:<5}"
            f" {cells['incidental']:>4}/{totals['incidental']:<6} {cells['tokens']:>10,}"
        )
    for item in figures["lost_vs_seed"]:
        print(f"  kept by the seed, not by ours at its size: {item}")
    print("overhead per call (median):")
    for o in figures["overhead"]:
        print(
            f"  {o['output']:<16} {o['bytes']:>9,} bytes: round trip less the command "
            f"{o['round_trip_less_command_ms']:.1f} ms (in the server {o['in_server_ms']:.1f} ms);"
            f" a bare cat by subprocess {o['bare_cat_ms']:.1f} ms"
        )
    m = figures["memory"]
    print(
        f"500 MiB of output ({m['bytes']:,} bytes, {m['held']:,} held) in {m['seconds']:.1f} s: "
        f"server RSS {m['rss_before_mb']:.0f} MB before, peak {m['peak_rss_mb']:.0f} MB"
    )
    if args.json:
        corpus.write_json(args.json, {"totals": totals, **figures})
    ours, seed = rows["ours, same size"], rows["seed 20+20"]
    if ours["critical"] < seed["critical"]:
        print("FAIL: fewer critical needles than the seed rule at the same size")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
