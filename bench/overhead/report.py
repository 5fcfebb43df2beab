"""Figures from raw rounds, and the table printed on stdout.

Latency samples are pooled over a target's rounds; "added" is the target's percentile minus the
direct (upstream-only) percentile of the same scenario. CPU per request is the sum of the server's
CPU over its rounds divided by the requests it served, so 10 ms clock ticks average out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.overhead.procs import Server
    from bench.overhead.runner import Bench


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no samples."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


@dataclass
class Rounds:
    """Everything measured for one target in one scenario, summed over its rounds."""

    target: str
    server: str
    n: int = 0
    elapsed: float = 0.0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    chunks: int = 0
    events: int = 0
    cpu: float = 0.0
    upstream_cpu: float = 0.0
    per_round: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def add(self, result: dict[str, Any], cpu: float, upstream_cpu: float) -> None:
        self.n += result["n"]
        self.elapsed += result["elapsed"]
        self.errors += result["errors"]
        self.error_samples.extend(result["error_samples"][: 5 - len(self.error_samples)])
        self.lat.extend(result["lat"])
        self.ttfb.extend(result["ttfb"])
        self.chunks += result["chunks"]
        self.events += result["events"]
        self.cpu += cpu
        self.upstream_cpu += upstream_cpu
        self.headers = self.headers or result["headers"]
        self.per_round.append(
            {
                "n": result["n"],
                "elapsed": round(result["elapsed"], 4),
                "rps": round(result["n"] / result["elapsed"], 1) if result["elapsed"] else 0,
                "p50_ms": round(percentile(result["lat"], 50) * 1000, 3),
                "cpu_s": round(cpu, 3),
                "upstream_cpu_s": round(upstream_cpu, 3),
                "errors": result["errors"],
            }
        )

    @property
    def rps(self) -> float:
        return self.n / self.elapsed if self.elapsed else 0.0

    def p(self, q: float) -> float:
        return percentile(self.lat, q)

    def ttfb_p(self, q: float) -> float:
        return percentile(self.ttfb, q)

    @property
    def cpu_per_req(self) -> float:
        return self.cpu / self.n if self.n else float("nan")

    @property
    def chunks_per_resp(self) -> float:
        return self.chunks / self.n if self.n else float("nan")

    def summary(self, direct: Rounds | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": self.target,
            "server": self.server,
            "requests": self.n,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "rps": self.rps,
            "p50_ms": self.p(50) * 1000,
            "p99_ms": self.p(99) * 1000,
            "ttfb_p50_ms": self.ttfb_p(50) * 1000,
            "ttfb_p99_ms": self.ttfb_p(99) * 1000,
            "cpu_per_req_us": self.cpu_per_req * 1e6,
            "upstream_cpu_per_req_us": self.upstream_cpu / self.n * 1e6 if self.n else None,
            "chunks_per_resp": self.chunks_per_resp,
            "events_per_resp": self.events / self.n if self.n else None,
            "headers": self.headers,
            "rounds": self.per_round,
        }
        if self.events:
            out["cpu_per_chunk_us"] = self.cpu_per_req / self.chunks_per_resp * 1e6
        if direct is not None:
            out["added_p50_ms"] = (self.p(50) - direct.p(50)) * 1000
            out["added_p99_ms"] = (self.p(99) - direct.p(99)) * 1000
            out["added_ttfb_p50_ms"] = (self.ttfb_p(50) - direct.ttfb_p(50)) * 1000
        return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return a / b


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.{digits}f}"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"x{x:.2f}"


HEADER = (
    f"{'target':<16}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}"
    f"{'ttfb50':>8}{'CPU/req us':>11}{'chunks':>7}{'CPU/chunk us':>13}{'err':>5}"
)


def scenario_table(title: str, rows: list[dict[str, Any]], sse: bool) -> list[str]:
    lines = [title, HEADER, "-" * len(HEADER)]
    for r in rows:
        lines.append(
            f"{r['target']:<16}{fmt(r['rps'], 0):>8}{fmt(r['p50_ms']):>9}{fmt(r['p99_ms']):>9}"
            f"{fmt(r.get('added_p50_ms')):>9}{fmt(r.get('added_p99_ms')):>9}"
            f"{fmt(r['ttfb_p50_ms']):>8}{fmt(r['cpu_per_req_us'], 0):>11}"
            f"{fmt(r['chunks_per_resp'], 1) if sse else '':>7}"
            f"{fmt(r.get('cpu_per_chunk_us'), 1) if sse else '':>13}{r['errors']:>5}"
        )
    return lines


def versus(rows: list[dict[str, Any]], name: str, base: str) -> dict[str, float | None] | None:
    """Ratios of one target to another (e.g. proxy/floor) on the figures that matter."""
    by = {r["target"]: r for r in rows}
    if name not in by or base not in by:
        return None
    a, b = by[name], by[base]
    return {
        "added_p50": ratio(a.get("added_p50_ms"), b.get("added_p50_ms")),
        "added_p99": ratio(a.get("added_p99_ms"), b.get("added_p99_ms")),
        "cpu_per_req": ratio(a["cpu_per_req_us"], b["cpu_per_req_us"]),
        "rps": ratio(a["rps"], b["rps"]),
    }


def versus_line(label: str, v: dict[str, float | None]) -> str:
    return (
        f"  {label}: +p50 {fmt_ratio(v['added_p50'])}, +p99 {fmt_ratio(v['added_p99'])}, "
        f"CPU/req {fmt_ratio(v['cpu_per_req'])}, req/s {fmt_ratio(v['rps'])}"
    )


# --- printing a whole run ---------------------------------------------------------------------


def print_summary(b: Bench, floor_name: str) -> None:
    """The ratios the lead reads first, and what one more streamed chunk costs each server."""
    print(f"== summary: ratios to {floor_name} (+p50/+p99 = added latency over direct)")
    cols = f"{'+p50':>8}{'+p99':>8}{'CPU/req':>9}{'req/s':>8}"
    print(f"  {'scenario':<14}{'c':>4}  {'target':<16}{cols}")
    for res in b.out["scenarios"]:
        for key, v in res.get("ratios", {}).items():
            print(
                f"  {res['name']:<14}{res['concurrency']:>4}  {key.split('/')[0]:<16}"
                f"{fmt_ratio(v['added_p50']):>8}{fmt_ratio(v['added_p99']):>8}"
                f"{fmt_ratio(v['cpu_per_req']):>9}{fmt_ratio(v['rps']):>8}"
            )
    by = {(r["name"], r["concurrency"]): r for r in b.out["scenarios"]}
    lines = []
    marginal: dict[str, dict[str, float]] = {}
    # Paced events (one per chunk) when the profile measured them; else the unpaced stream.
    paced = any(name == "small-sse-paced" for name, _ in by)
    for c in (1, 64):
        js = by.get(("small-json", c))
        ss = by.get(("small-sse-paced" if paced else "small-sse", c))
        if not js or not ss:
            continue
        jrows = {r["target"]: r for r in js["targets"]}
        for r in ss["targets"]:
            j = jrows.get(r["target"])
            if j is None or r["target"].startswith("direct (") or not r["chunks_per_resp"]:
                continue
            extra = (r["cpu_per_req_us"] - j["cpu_per_req_us"]) / r["chunks_per_resp"]
            marginal.setdefault(r["target"], {})[f"c{c}"] = extra
            lines.append(f"  {r['target']:<16}c={c:<4}{extra:8.1f} us per chunk")
    if lines:
        print(
            "\n== streaming cost: (CPU/req SSE - CPU/req JSON) / chunks relayed, small body"
            + (" (SSE paced 1 ms apart: one event per chunk)" if paced else "")
        )
        print("\n".join(lines))
    b.out["marginal_cpu_per_chunk_us"] = marginal
    short, long = by.get(("small-sse-paced", 1)), by.get(("small-sse-paced-long", 1))
    if short and long:
        # Two paced streams of different lengths: their CPU difference per extra chunk is the
        # cost of one more chunk alone (the figure above also spreads SSE's per-stream setup).
        srows = {r["target"]: r for r in short["targets"]}
        slope: dict[str, float] = {}
        for r in long["targets"]:
            s = srows.get(r["target"])
            if s is None or r["target"].startswith("direct ("):
                continue
            extra_chunks = (r["chunks_per_resp"] or 0) - (s["chunks_per_resp"] or 0)
            if extra_chunks <= 0:
                continue
            slope[r["target"]] = (r["cpu_per_req_us"] - s["cpu_per_req_us"]) / extra_chunks
        if slope:
            print(
                "\n== one more streamed chunk: (CPU/req of a 101-event paced stream - of a"
                " 21-event one) / extra chunks, c=1"
            )
            for name, v in slope.items():
                print(f"  {name:<16}{v:8.1f} us per chunk")
        b.out["slope_cpu_per_chunk_us"] = slope
    print()


def print_rss(b: Bench) -> None:
    print(
        "== RSS (MB): idle after start; the largest after the c=64 rounds; the largest peak"
        " during them (VmHWM)"
    )
    for name in b.servers:
        idle = b.rss.get("idle", {}).get(name)
        after = b.rss.get("after_c64", {}).get(name)
        peak = b.rss.get("peak_c64", {}).get(name)
        print(f"  {name:<16}{fmt(idle, 1):>8}{fmt(after, 1):>8}{fmt(peak, 1):>8}")
    # Scenarios run in order, so each line includes what the earlier ones left behind.
    for kind in ("after", "peak"):
        steps = [k for k in b.rss if k.startswith(kind + " ")]
        if not steps:
            continue
        print(f"  {kind} each c=64 scenario, in run order: " + ", ".join(steps))
        for name in b.servers:
            figures = " ".join(f"{fmt(b.rss[k].get(name), 1):>8}" for k in steps)
            print(f"  {name:<16}{figures}")
    print()


def scraped(server: Server, name: str, **labels: str) -> float | None:
    """One sample of a server's /metrics, e.g. `shrink_cache_entries`, cache="retrieval"."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def print_store(b: Bench, names: list[str]) -> dict[str, Any]:
    """The retrieval store's entries in each proxy after the run, read from its /metrics."""
    out: dict[str, Any] = {}
    print('== retrieval store after the run (shrink_cache_*{cache="retrieval"})')
    for name in names:
        server = b.servers[name]
        entries = scraped(server, "shrink_cache_entries", cache="retrieval")
        held = scraped(server, "shrink_retrieval_store_bytes")
        evicted = scraped(server, "shrink_retrieval_store_evicted_total")
        out[name] = {"entries": entries, "bytes": held, "evicted": evicted}
        mb = None if held is None else held / 1e6
        print(
            f"  {name:<16} entries {fmt(entries, 0):>8}  MB {fmt(mb, 1):>8}  "
            f"evicted {fmt(evicted, 0):>8}"
        )
    print()
    return out


def print_header(b: Bench) -> None:
    info = b.out["bodies"]
    print(f"profile {b.args.profile}; servers on 127.0.0.1; encoding {info['encoding']}")
    for name in ("small-json", "large-json"):
        print(
            f"  {name}: {info[name]['bytes']:,} bytes, {info[name]['tokens']:,} tokens, "
            f"{info[name]['messages']} messages"
        )
    if "tiktoken_encode_large_ms" in info:
        print(
            f"  tiktoken encode of the large body once: {info['tiktoken_encode_large_ms']:.1f} ms"
        )
    print(f"  proxy: window 10,000,000 (untouched); shrink: window {b.args.shrink_window:,}")
    print(
        "  '+p50/+p99' = latency added over direct; ttfb50 = median time to first byte "
        "(JSON: headers; SSE: first event); CPU = server process utime+stime / requests\n",
        flush=True,
    )
