"""`python -m bench.adversarial`: every case planned in-process, then the head-of-line run.

    python -m bench.adversarial [--profile smoke|full] [--only SUBSTRING] [--json FILE]
        [--no-http] [--keep-bodies] [--list]

In-process: each case's body is written to a file, planned in a forked child (bench.adversarial
.forks) with a timeout, then replayed in a second worker with another hash seed; one row per
case. Over HTTP: the `heavy` cases are POSTed to a real proxy while a probe measures small
requests (bench.adversarial.hol). Exit status 1 when a case times out, errors or breaks an
invariant, or a heavy request fails over HTTP or a probe gets an error: timing ratios are
printed, never asserted (the machines are noisy), except through the per-case timeout.
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import corpus
from bench.adversarial import cases, hol
from bench.adversarial.cases import Case, Generator
from bench.adversarial.forks import Outcome, Worker
from bench.overhead.runner import source_state

MB = 1024 * 1024


@dataclass(frozen=True)
class Profile:
    timeout: float  # seconds for one cold plan of one case (and for its replay)
    http_timeout: float  # seconds for one heavy request over HTTP
    probes: int  # probes with no load


CONCURRENT = 4  # copies of the largest heavy body sent at once (more than the worker threads)
PROFILES = {"smoke": Profile(15, 20, 60), "full": Profile(120, 180, 100)}
HEADER = (
    "| case | body MB | msgs | plan s | encode s | encodes | peak RSS MB | RSS x body "
    "| invariants |\n|---|---:|---:|---:|---:|---:|---:|---:|---|"
)

HTTP_HEADER = (
    "\n| heavy request | its status | probes | p50 ms | p99 ms | max ms | probe errors "
    "| proxy peak RSS MB |\n|---|---|---:|---:|---:|---:|---|---:|"
)


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return ""
    return "-" if math.isnan(x) else f"{x:,.{digits}f}"


def case_row(label: str, row: dict[str, Any]) -> str:
    r = row.get("result", {})
    mb = fmt(row["body_bytes"] / MB, 2 if row["body_bytes"] < 10 * MB else 1)
    head = f"| {label} | {mb} | {row['messages']:,} |"
    if row["status"] == "timeout":
        return f"{head} > {row['seconds']:.0f} | | | | | TIMEOUT |"
    if row["status"] != "ok":
        where = f" ({r['where']})" if r.get("where") else ""
        return f"{head} | | | | | {row['status'].upper()} {row['detail'][:90]}{where} |"
    ratio = r["plan_s"] / max(r["encode_s"], 1e-6)
    rss = r["peak_mb"] * MB / row["body_bytes"]
    failed = ", ".join(row["failed"]) or "OK"
    return (
        f"{head} {fmt(r['plan_s'], 3)} | {fmt(r['encode_s'], 3)} | {fmt(ratio, 1)} | "
        f"{fmt(r['peak_mb'], 0)} | {fmt(rss, 1)} | {failed} |"
    )


def job(path: Path, case: Case, run: str, out: Path) -> dict[str, Any]:
    settings = dict(case.settings)
    return {
        "body": str(path),
        "window": case.window,
        "settings": settings,
        "mode": case.mode,
        "run": run,
        "out": str(out),
    }


def run_case(
    gen: Generator, size: int, label: str, workers: tuple[Worker, Worker], tmp: Path, p: Profile
) -> tuple[dict[str, Any], Case, Path]:
    case = gen.build(size)
    path = tmp / f"{len(list(tmp.glob('*.json')))}.json"
    path.write_bytes(orjson.dumps(case.body))
    first: Outcome = workers[0].run(job(path, case, "measure", tmp / "out"), p.timeout)
    row: dict[str, Any] = {
        "case": label,
        "generator": gen.name,
        "size": size,
        "unit": gen.unit,
        "window": case.window,
        "body_bytes": path.stat().st_size,
        "messages": len(case.body["messages"]),
        "status": first.status,
        "seconds": first.seconds,
        "detail": first.detail,
        "result": first.result,
        "failed": dict(first.result.get("failed", {})),
    }
    if first.status == "ok":
        again = workers[1].run(job(path, case, "replay", tmp / "out"), p.timeout)
        if again.status != "ok":
            row["failed"]["deterministic"] = f"replay: {again.status} {again.detail}"
        elif again.result["digest"] != first.result["digest"]:
            row["failed"]["deterministic"] = "a second cold run (other hash seed) differs"
    return row, case, path


def failures_of(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        if row["status"] != "ok":
            out.append(f"{row['case']}: {row['status']} {row['detail']}")
        for name, why in row["failed"].items():
            out.append(f"{row['case']}: {name}: {why}")
    return out


def in_process(args: argparse.Namespace, tmp: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every case's row, and (label, case, body file) of the heavy ones for the HTTP run."""
    p = PROFILES[args.profile]
    rows: list[dict[str, Any]] = []
    found: dict[str, list[Any]] = {}
    workers = (Worker(1, tmp / "worker-1.log"), Worker(2, tmp / "worker-2.log"))
    try:
        print(HEADER, flush=True)
        for gen, size, label in cases.cases(args.profile, args.only):
            row, case, path = run_case(gen, size, label, workers, tmp, p)
            print(case_row(label, row), flush=True)
            rows.append(row)
            if gen.heavy:
                found.setdefault(gen.name, []).append((row, (label, case, path)))
            elif not args.keep_bodies:
                path.unlink()
    finally:
        for w in workers:
            w.close()
    chosen = [worst(sized) for sized in found.values()]
    for sized in found.values():
        for _, (_, _, path) in sized:
            if not args.keep_bodies and all(path is not c[2] for c in chosen):
                path.unlink()
    return rows, chosen


def worst(sized: list[Any]) -> Any:
    """Of a heavy generator's sizes, the one sent over HTTP: the first that errored (deep-args
    at 1,000 levels breaks where 100,000 is refused early), else the largest."""
    errored = [case for row, case in sized if row["status"] == "error"]
    return errored[0] if errored else sized[-1][1]


def http_row(label: str, r: dict[str, Any]) -> str:
    h = r.get("heavy") or {}
    errors = ", ".join(f"{k} x{v}" for k, v in r["errors"].items()) or "0"
    errors += f", skipped x{r['skipped']}" if r["skipped"] else ""
    status = f"{h['status']} in {h['seconds']:.2f} s, {h['connection']}" if h else ""
    peak = fmt(r.get("proxy_peak_mb"), 0)
    return (
        f"| {label} | {status} | {r['probes']} | {fmt(r['p50_ms'], 1)} | {fmt(r['p99_ms'], 1)} | "
        f"{fmt(r['max_ms'], 1)} | {errors} | {peak} |"
    )


def over_http(heavy: list[Any], args: argparse.Namespace, tmp: Path) -> tuple[list[Any], list[str]]:
    """Each heavy case POSTed to a proxy at the case's window and settings, probes around it."""
    p = PROFILES[args.profile]
    rows: list[Any] = []
    failures: list[str] = []
    print(HTTP_HEADER, flush=True)
    up = hol.upstream(tmp)
    try:
        groups: dict[Any, list[Any]] = {}
        largest = max(heavy, key=lambda h: h[2].stat().st_size)
        # The largest body also goes CONCURRENT times at once: memory while bodies queue.
        for i, (label, case, path) in enumerate([*heavy, largest]):
            key = (case.window, tuple(sorted(case.settings.items())))
            copies = CONCURRENT if i == len(heavy) else 1
            groups.setdefault(key, []).append((label, path, copies))
        for (window, settings), items in groups.items():
            proxy = hol.Proxy(up, window, dict(settings), tmp)
            try:
                base = hol.baseline(proxy, p.probes, p.http_timeout)
                print(http_row(f"(no load, window {window})", base), flush=True)
                rows.append({"case": None, "window": window, **base})
                for label, path, copies in items:
                    raw = path.read_bytes()
                    r = hol.run_case(proxy, raw, p.probes, p.http_timeout, copies)
                    label = label if copies == 1 else f"{label} x{copies} at once"
                    print(http_row(label, r), flush=True)
                    rows.append({"case": label, "window": window, "copies": copies, **r})
                    bad = r["heavy"]["status"] != "200" or r["heavy"]["connection"] == "reset"
                    if bad or r["errors"] or not r["proxy_alive"]:
                        h = r["heavy"]
                        failures.append(
                            f"http {label}: {h['status']} ({h['connection']}), "
                            f"probe errors {r['errors']}"
                        )
            finally:
                proxy.stop()
    finally:
        up.stop()
    return rows, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adversarial", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    parser.add_argument("--only", metavar="SUBSTRING", help="only cases whose name holds this")
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    parser.add_argument("--no-http", action="store_true", help="skip the head-of-line run")
    parser.add_argument("--keep-bodies", action="store_true", help="keep the body files")
    parser.add_argument("--list", action="store_true", help="list the generators and exit")
    args = parser.parse_args(argv)
    if args.list:
        for gen in cases.generators():
            smoke, full = (
                "/".join(gen.label(n).split("@")[1] for n in s) for s in (gen.smoke, gen.full)
            )
            print(f"{gen.name} ({gen.unit}: smoke {smoke}, full {full}): {gen.why}")
        return 0
    corpus.setup_environment()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-adversarial-"))
    out: dict[str, Any] = {"profile": args.profile, "source": source_state()}
    rows, heavy = in_process(args, tmp)
    out["cases"] = rows
    failures = failures_of(rows)
    if heavy and not args.no_http:
        out["http"], http_failures = over_http(heavy, args, tmp)
        failures += http_failures
    out["failures"] = failures
    out["seconds"] = round(time.monotonic() - started, 1)
    corpus.write_json(args.json, out)
    print(f"\ntotal {out['seconds']}s")
    if failures:
        print(f"FAIL ({len(failures)}):\n  " + "\n  ".join(failures))
        print(f"logs kept in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("OK")
    return 0
