"""Claude Code's billing line against a local server's prefix cache, through the proxy.

    python -m bench.billing_reuse [--session ID] [--turns N] [--window TOKENS]

Claude Code opens `system` with a line (`x-anthropic-billing-header: cc_version=...; cch=...;`)
that changes on every request, so a backend's prefix cache matches only the few tokens before
it. A dev-corpus session in Messages form is replayed as Claude Code sends it
(bench.anthropic_form.claude_code: a new billing line every turn, thinking blocks with
signatures, breakpoints, streamed) turn by turn through the proxy to llama.cpp's real
`/v1/messages`, twice: with `billing_header=strip` (what `auto` does for a non-Anthropic
upstream) and with `keep`. The server's own usage says what it reused on each turn:
`cache_read_input_tokens` of the whole prompt (`input_tokens` + cache reads), and its wall time.

Per variant: turns, failures, turns whose cut moved, prompt tokens and of them read from the
cache (`reuse`), over the turns after the first, and seconds per turn. Exit 1 when a turn fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import corpus
from bench.anthropic_form import claude_code, to_anthropic
from bench.prefix import turns
from proxy.app import create_app
from proxy.settings import Settings
from proxy.sse import AnthropicUsageTap, prompt_tokens
from tests.e2e import llama
from tests.fakes.server import serve

MODEL = "smollm2"
TIMEOUT = 600.0
VARIANTS = ("strip", "keep")
SESSION = "dev-04-attrs-maxlen-regression-long"
ANSWER_TOKENS = 4  # a real client asks 32,000; the figures here are the prompt's


@dataclass
class Turn:
    status: int
    prompt: int  # the whole prompt as the server counted it
    cached: int  # of which read from its prefix cache
    trimmed: int  # messages the proxy dropped
    seconds: float
    error: str = ""  # the answer's start, when it failed


@dataclass
class Tally:
    variant: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(t.status != 200 for t in self.turns)

    @property
    def moves(self) -> int:
        return sum(a.trimmed != b.trimmed for a, b in zip(self.turns, self.turns[1:], strict=False))

    @property
    def later(self) -> list[Turn]:
        """The turns after the first: the first has no previous prompt to reuse."""
        return self.turns[1:]

    @property
    def reuse(self) -> float:
        prompt = sum(t.prompt for t in self.later)
        return sum(t.cached for t in self.later) / prompt if prompt else 0.0

    def row(self) -> str:
        later = self.later
        prompt = sum(t.prompt for t in later)
        cached = sum(t.cached for t in later)
        seconds = sum(t.seconds for t in later) / max(len(later), 1)
        return (
            f"{self.variant:>6} {len(self.turns):>5} {self.failures:>8} {self.moves:>10} "
            f"{prompt:>8} {cached:>8} {self.reuse:>6.1%} {seconds:>9.2f}"
        )


HEADER = f"{'billing':>6} {'turns':>5} {'failures':>8} {'cut moves':>10} "
HEADER += f"{'prompt':>8} {'cached':>8} {'reuse':>6} {'s / turn':>9}"


def requests(conv: corpus.Conversation, n: int) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The last `n` requests of `conv` as Claude Code sends them, numbered from 1 so every
    request has its own billing line."""
    out = []
    for i, messages in enumerate(turns(conv)[-n:], start=1):
        chat = {**conv.request(messages), "model": MODEL}
        headers, body = claude_code(to_anthropic(chat), i)
        del body["thinking"]  # SmolLM2 has no thinking mode to switch on; the blocks stay
        body["max_tokens"] = ANSWER_TOKENS
        body["temperature"] = 0
        out.append((headers, body))
    return out


def replay(url: str, variant: str, sent: list[tuple[dict[str, str], dict[str, Any]]]) -> Tally:
    """Send every request to the proxy at `url` in order, streamed, and read the usage."""
    tally = Tally(variant)
    with httpx.Client(timeout=TIMEOUT) as client:
        for headers, body in sent:
            started = time.monotonic()
            r = client.post(url + "/v1/messages", json=body, headers=headers)
            seconds = time.monotonic() - started
            tap = AnthropicUsageTap()
            tap.feed(r.content)
            tap.close()
            usage = tap.usage or {}
            trimmed = _trimmed(r.headers.get("x-shrink-actions", ""))
            tally.turns.append(
                Turn(
                    r.status_code,
                    prompt_tokens(usage) or 0,
                    int(usage.get("cache_read_input_tokens") or 0),
                    trimmed,
                    seconds,
                    "" if r.status_code == 200 else r.text[:300],
                )
            )
    return tally


def _trimmed(actions: str) -> int:
    for part in actions.split(","):
        name, _, n = part.strip().partition(":")  # "tools:6,trim:16"
        if name == "trim" and n.isdigit():
            return int(n)
    return 0


def run(server: str, variant: str, sent: list[tuple[dict[str, str], dict[str, Any]]]) -> Tally:
    """One variant through a fresh in-process proxy in front of `server` (base URL, no /v1)."""
    settings = Settings(upstream_url=server + "/v1", discover_window=True, billing_header=variant)
    with serve(create_app(settings)) as url:
        return replay(url, variant, sent)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--session", default=SESSION)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--window", type=int, default=4096, help="the server's context size")
    args = ap.parse_args(argv)
    why = llama.missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    model = llama.model_path()
    assert model is not None
    conv = next(c for c in corpus.load() if c.id == args.session)
    sent = requests(conv, args.turns)
    tallies = []
    with tempfile.TemporaryDirectory(prefix="bench-billing-") as tmp:
        for variant in VARIANTS:
            log = Path(tmp) / f"{variant}.log"
            # A fresh server per variant: neither inherits the other's cache.
            with llama.running(model, log, n_ctx=args.window, alias=MODEL) as server:
                tallies.append(run(server, variant, sent))
    print(f"{args.session}: its last {len(sent)} turns, llama.cpp window {args.window}")
    print(HEADER)
    for t in tallies:
        print(t.row())
    for t in tallies:
        for i, turn in enumerate(t.turns, start=1):
            if turn.error:
                print(f"{t.variant} turn {i}: {turn.status} {turn.error}")
    strip, keep = tallies
    print(
        f"reuse {strip.reuse:.1%} with the billing line stripped, {keep.reuse:.1%} kept; "
        f"prompt time per turn {_per_turn(strip):.2f} s vs {_per_turn(keep):.2f} s"
    )
    print(orjson.dumps({t.variant: t.reuse for t in tallies}).decode())
    return 1 if any(t.failures for t in tallies) else 0


def _per_turn(t: Tally) -> float:
    return sum(x.seconds for x in t.later) / max(len(t.later), 1)


if __name__ == "__main__":
    sys.exit(main())
