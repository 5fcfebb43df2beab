"""Every compiled pattern in the proxy against its adversarial strings: one line each.

    .venv/bin/python -m bench.adversarial.regex_report [SUBSTRING ...] [--seeds N]

For each pattern (those whose name holds one of the SUBSTRINGs, else all): its worst string,
the growth of its time from 16K to 128K characters over a plain scan's (1: linear; quadratic: 8),
its time at 128K in plain scans of the same string, and whether it exploded while grown from 64
characters. tests/test_patterns_linear.py asserts the growth.
"""

from __future__ import annotations

import argparse
import time

from bench.adversarial.patterns import compiled_patterns
from bench.adversarial.regex import check_linear, seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("only", nargs="*")
    parser.add_argument("--seeds", type=int, default=200, help="strings tried per pattern")
    args = parser.parse_args(argv)
    bad = 0
    started = time.perf_counter()
    for name, pattern in sorted(compiled_patterns().items()):
        if args.only and not any(o in name for o in args.only):
            continue
        v = check_linear(pattern, seeds(pattern, args.seeds))
        bad += not v.linear()
        state = "EXPLODES" if v.exploded else ("ok" if v.linear() else "SUPERLINEAR")
        print(
            f"{state:11} {name}: growth {v.growth:.2f}, {v.ratio:.1f} scans, "
            f"{v.seconds * 1e3:.2f} ms at 128K ({v.label} of {v.unit[:30]!r})",
            flush=True,
        )
    print(f"{bad} not linear; {time.perf_counter() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
