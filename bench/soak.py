"""Steady streaming load for minutes: memory must stay flat and errors at zero.

`--concurrency` streams (default 20) run back to back through the proxy for `--minutes`
(default 10; `--minutes 1` is the smoke run). The proxy's RSS is printed at the start, every
`--every` seconds and at the end, with the streams done and errors so far; at the end also its
CPU and its connections to the upstream (which must not exceed the concurrency).

    TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache .venv/bin/python bench/soak.py --minutes 1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.overhead.procs import cpu_seconds, rss_mb  # noqa: E402
from bench.streams import Tally, raise_fd_limit, run_load, servers, summary_ms  # noqa: E402


def upstream_connections(pid: int, port: int) -> int:
    """ESTABLISHED sockets of `pid` to `port`, from /proc (no psutil needed)."""
    import os

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            remote_port = int(parts[2].split(":")[1], 16)
            if parts[3] == "01" and remote_port == port and parts[9] in inodes:
                count += 1
    return count


async def soak(port: int, pid: int, args: argparse.Namespace) -> Tally:
    seconds = args.minutes * 60
    started = time.monotonic()
    load = asyncio.create_task(
        run_load(port, args.concurrency, args.events, args.gap_ms, rounds=10**9, seconds=seconds)
    )
    rss0 = rss_mb(pid)
    print(f"[{0:6.0f}s] RSS {rss0:.1f} MB (start)", flush=True)
    samples = [rss0]
    while not load.done():
        await asyncio.wait({load}, timeout=args.every)
        if not load.done():
            samples.append(rss_mb(pid))
            print(f"[{time.monotonic() - started:6.0f}s] RSS {samples[-1]:.1f} MB", flush=True)
    tally = load.result()
    samples.append(rss_mb(pid))
    print(
        f"[{time.monotonic() - started:6.0f}s] RSS {samples[-1]:.1f} MB (end); "
        f"growth {samples[-1] - rss0:+.1f} MB, max {max(samples):.1f} MB",
        flush=True,
    )
    return tally


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--events", type=int, default=20)
    p.add_argument("--gap-ms", type=int, default=50)
    p.add_argument("--every", type=float, default=30, help="seconds between RSS lines")
    args = p.parse_args()
    raise_fd_limit()
    with servers(args.events) as (upstream, proxy):
        cpu0 = cpu_seconds(proxy.pid)
        started = time.monotonic()
        tally = asyncio.run(soak(proxy.port, proxy.pid, args))
        wall = time.monotonic() - started
        cpu = cpu_seconds(proxy.pid) - cpu0
        time.sleep(1)  # let the last responses settle in the pool
        conns = upstream_connections(proxy.pid, upstream.port)
        print(f"streams {len(tally.total)} in {wall:.0f}s, errors {len(tally.errors)}")
        for e in sorted(set(tally.errors))[:5]:
            print(f"  error: {e}")
        print(f"time to first event {summary_ms(tally.ttfb)}")
        print(f"whole stream        {summary_ms(tally.total)}")
        print(
            f"proxy CPU {cpu:.1f}s ({100 * cpu / wall:.0f}% of one core); "
            f"connections to the upstream at the end: {conns} (concurrency {args.concurrency})"
        )
    bad = bool(tally.errors) or conns > args.concurrency
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
