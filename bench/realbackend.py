"""The dev corpus replayed turn by turn through the proxy to llama.cpp's real server.

    python -m bench.realbackend [--windows 4096,8192] [--only SUBSTRING] [--variants ...]
        [--json FILE]

What a counter that agrees with tiktoken cannot show: llama.cpp counts with the model's own
tokenizer (SmolLM2's, ~1.1-1.5x cl100k's on this corpus), so the proxy calibrates its budget
from the counts the server reports, and the server's prefix cache reuses only an exact prefix
of the last prompt. Each conversation is sent as an agent sends it (bench.prefix.turns: every
point where the assistant answers next, then the whole), one request after the other, to a
server with one slot and its prompt cache on (`cache_prompt`, llama.cpp's default), reading the
server's own `timings` per turn: `prompt_n` tokens evaluated, `cache_n` reused.

Variants, each with a fresh server per window:
- `proxy`: shrink-proxy as a new user runs it (configured window 32k, discovery on: `/props`
  states the real one; calibration on), in-process on a loopback port.
- `nocal`: the proxy told the real window (`model_windows`), so it never calibrates: requests
  that overflow in the model's tokens are recovered by the overflow retry.
- `seed`: bench.baseline's seed rule (20+20 lines of every tool result over 800 tokens, drop
  the oldest until it fits), planned per request and sent straight to the server.

Per variant and window: turns, failures (a non-200 answer), turns whose cut moved (the number
of dropped messages changed), moves back (it shrank: the cut moved towards the front, a flap),
budgets seen, and the prompt tokens the server evaluated against those it reused (`reuse`:
cache_n / (cache_n + prompt_n)) and its prompt time. Generations are 8 tokens at temperature 0.
Exit 1 when the proxy variant fails a turn or flaps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import corpus
from bench.baseline import seed_plan
from bench.prefix import turns
from proxy.app import create_app
from proxy.settings import Settings
from tests.e2e import llama
from tests.fakes.server import serve

MODEL = "smollm2"
TIMEOUT = 600.0
VARIANTS = ("proxy", "nocal", "seed")


@dataclass
class Tally:
    variant: str
    window: int
    turns: int = 0
    failures: int = 0
    moves: int = 0
    moves_back: int = 0
    evaluated: int = 0
    reused: int = 0
    prompt_ms: float = 0.0
    budgets: list[int] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reuse(self) -> float:
        total = self.evaluated + self.reused
        return self.reused / total if total else 0.0


def trimmed(actions: str) -> int:
    """Dropped messages from `x-shrink-actions` (`tools:6,trim:16` -> 16)."""
    for part in actions.split(","):
        name, _, n = part.partition(":")
        if name == "trim" and n.isdigit():
            return int(n)
    return 0


@contextlib.contextmanager
def sender(variant: str, server: str, window: int) -> Iterator[Any]:
    """A function body -> (response, dropped messages) for the variant."""
    if variant == "seed":
        settings = corpus.settings(context_window=window)
        tokenizers = corpus.tokenizers()
        with httpx.Client(timeout=TIMEOUT) as client:

            def send_seed(body: dict[str, Any]) -> tuple[httpx.Response, int, str]:
                plan = seed_plan(body, settings, tokenizers)
                out = {**body, "messages": plan.messages}
                r = client.post(server + "/v1/chat/completions", json=out)
                return r, len(body["messages"]) - len(plan.messages), ""

            yield send_seed
        return
    overrides: dict[str, Any] = dict(upstream_url=server + "/v1", log_level="warning")
    if variant == "nocal":
        overrides.update(model_windows={MODEL: window}, discover_window=False)
    else:
        overrides.update(context_window=32768, discover_window=True)
    with serve(create_app(Settings(**overrides))) as url, httpx.Client(timeout=TIMEOUT) as client:

        def send_proxy(body: dict[str, Any]) -> tuple[httpx.Response, int, str]:
            r = client.post(url + "/v1/chat/completions", json=body)
            return (
                r,
                trimmed(r.headers.get("x-shrink-actions", "")),
                r.headers.get("x-shrink-budget", ""),
            )

        yield send_proxy


def run(variant: str, window: int, convs: list[corpus.Conversation], log_dir: Path) -> Tally:
    model = llama.model_path()
    assert model is not None
    tally = Tally(variant, window)
    with (
        llama.running(model, log_dir / f"{variant}-{window}.log", n_ctx=window, alias=MODEL) as url,
        sender(variant, url, window) as send,
    ):
        for conv in convs:
            last: int | None = None
            for messages in turns(conv):
                body = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0}
                r, dropped, budget = send(body)
                tally.turns += 1
                row: dict[str, Any] = {"conv": conv.id, "n": len(messages), "status": r.status_code}
                if r.status_code != 200:
                    tally.failures += 1
                    row["error"] = r.text[:200]
                    tally.log.append(row)
                    continue
                timings = r.json().get("timings") or {}
                evaluated, reused = timings.get("prompt_n", 0), timings.get("cache_n", 0)
                tally.evaluated += evaluated
                tally.reused += reused
                tally.prompt_ms += timings.get("prompt_ms", 0.0)
                if budget and (not tally.budgets or tally.budgets[-1] != int(budget)):
                    tally.budgets.append(int(budget))
                if last is not None and dropped != last:
                    tally.moves += 1
                    tally.moves_back += dropped < last
                last = dropped
                row.update(dropped=dropped, budget=budget, prompt_n=evaluated, cache_n=reused)
                tally.log.append(row)
    return tally


def table(tallies: list[Tally]) -> str:
    rows = [
        "| window | variant | turns | failed | cut moved | moved back | budgets | evaluated |"
        " reused | reuse | prompt s |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for t in tallies:
        budgets = " -> ".join(f"{b:,}" for b in t.budgets[:6]) + (" ..." * (len(t.budgets) > 6))
        rows.append(
            f"| {t.window:,} | {t.variant} | {t.turns} | {t.failures} | {t.moves} |"
            f" {t.moves_back} | {budgets or '-'} | {t.evaluated:,} | {t.reused:,} |"
            f" {t.reuse:.1%} | {t.prompt_ms / 1000:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="4096,8192")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--only", default="", help="conversations whose id contains this")
    ap.add_argument("--json", help="write every turn's figures here")
    args = ap.parse_args(argv)
    why = llama.missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    convs = [c for c in corpus.load() if args.only in c.id]
    tallies = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-realbackend-") as tmp:
        for window in (int(w) for w in args.windows.split(",")):
            for variant in args.variants.split(","):
                t = run(variant, window, convs, Path(tmp))
                tallies.append(t)
                print(table([t]).splitlines()[-1], flush=True)
    print()
    print(table(tallies))
    print(f"\n{len(convs)} conversations; total {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(t) for t in tallies], indent=1))
    bad = [t for t in tallies if t.variant == "proxy" and (t.failures or t.moves_back)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
