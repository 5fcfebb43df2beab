"""Hold 500 concurrent streams through the proxy; p99 latency it adds, its RSS and CPU.

The same load runs straight at the fake upstream and then through the proxy, in one run (the
machine is shared and noisy: only figures from the same run are compared). Each stream is
`--events` SSE events `--gap-ms` apart, like a model generating; every worker does `--rounds`
streams back to back on one keep-alive connection. Any error is counted and printed.

    TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache .venv/bin/python bench/load.py [--concurrency 500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.overhead.procs import cpu_seconds, rss_mb  # noqa: E402
from bench.streams import pct, raise_fd_limit, run_load, servers, summary_ms  # noqa: E402


class Sampler:
    """RSS of a process every `every` seconds in a thread, so sampling never waits on the load."""

    def __init__(self, pid: int, every: float = 0.25):
        self.pid, self.every = pid, every
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--events", type=int, default=20)
    p.add_argument("--gap-ms", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3, help="streams per worker per phase")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the proxy")
    args = p.parse_args()
    print(f"fd limit raised to {raise_fd_limit()}")

    def load(port: int) -> tuple:
        started = time.monotonic()
        tally = asyncio.run(
            run_load(
                port, args.concurrency, args.events, args.gap_ms, rounds=args.rounds, seconds=600
            )
        )
        return tally, time.monotonic() - started

    errors = 0
    env = dict(kv.split("=", 1) for kv in args.env)
    with servers(args.events, env) as (upstream, proxy):
        load(proxy.port)  # warm-up: connections, encodings, discovery
        direct, direct_wall = load(upstream.port)
        rss_before, cpu_before = rss_mb(proxy.pid), cpu_seconds(proxy.pid)
        with Sampler(proxy.pid) as sampler:
            via, via_wall = load(proxy.port)
        cpu = cpu_seconds(proxy.pid) - cpu_before
        rss_after = rss_mb(proxy.pid)
        for name, tally, wall in (("direct", direct, direct_wall), ("proxy", via, via_wall)):
            print(
                f"{name:>6}: {len(tally.total)} streams in {wall:.1f}s, errors {len(tally.errors)}"
            )
            print(f"        time to first event  {summary_ms(tally.ttfb)}")
            print(f"        whole stream         {summary_ms(tally.total)}")
            errors += len(tally.errors)
            for e in sorted(set(tally.errors))[:5]:
                print(f"        error: {e}")
        for what, a, b in (
            ("first event", direct.ttfb, via.ttfb),
            ("stream", direct.total, via.total),
        ):
            print(
                f"added by the proxy ({what}): p50 {(pct(b, 0.5) - pct(a, 0.5)) * 1000:+.1f} ms, "
                f"p99 {(pct(b, 0.99) - pct(a, 0.99)) * 1000:+.1f} ms"
            )
        print(
            f"proxy RSS: {rss_before:.1f} MB before, peak {sampler.peak:.1f} MB, "
            f"{rss_after:.1f} MB after; CPU {cpu:.1f}s over {via_wall:.1f}s "
            f"({100 * cpu / via_wall:.0f}% of one core), {cpu / max(1, len(via.total)) * 1000:.2f} "
            "ms per stream"
        )
    print(f"errors: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
