"""How planning scales with the number of messages: cold and warm cost of long agent sessions.

    .venv/bin/python -m bench.trim_scale
        [DIR] [--sizes 1000 2000 4000 8000 16000] [--windows 4096 32768] [--reps 1]
        [--give-up 120] [--json FILE]

A session of N messages is built from one system prompt and agent turns: a user request now and
then, an assistant tool call (a shell command as its arguments), the tool's result, sometimes an
assistant reply. The results are the corpus's tool outputs (a window of at most ~60 lines of
each, at an offset that varies by turn, plus the command's own `$` line and exit code), so every
result is a text not seen before and each one holds the errors, paths and versions the facts
look for. For each size and window, timed on a fresh `Tokenizers` and `Shrinker` (the encoding
file loaded first, untimed, as at startup):

  cold   the first plan of the session: every count, compaction, fact and cut is new;
  warm   the same request again on the same Shrinker;

against `enc`, tiktoken encoding the session's concatenated text (contents and tool-call
arguments) once. Times are CPU seconds of the process (all its threads), which other
processes on a shared machine disturb less than wall time; `wall` is the cold plan's wall time.
`x2` is the cold cost over that of the size before it: linear planning doubles (the body does),
quadratic planning quadruples. A size whose cold plan took longer than `--give-up` seconds
ends the run for that window. `--set NAME=VALUE` overrides a setting (e.g. token_cache_size).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import orjson

from bench import corpus
from bench.corpus import Message
from proxy.shrinker import Shrinker

SIZES = (1000, 2000, 4000, 8000, 16000)
WINDOWS = (4096, 32768)
MAX_LINES = 60
MAX_CHARS = 4000
SYSTEM = "You are a coding agent. Run commands with the `run` tool; read their output closely."
COMMANDS = (
    "pytest -x tests/test_{n}.py",
    "pip install -r requirements-{n}.txt",
    "npm test -- --runInBand src/mod{n}",
    "make -C build/{n}",
    "git log --stat -n 5 -- src/mod{n}.py",
    "python -m mypy src/pkg{n}",
)
USER = (
    "The build is red again after change {n}; find out why and fix it.",
    "Run the tests for module {n} and tell me what fails.",
    "Install what step {n} needs and check it imports.",
)
REPLY = "Step {n}: the output above shows what failed; I will look at the traceback next."


def outputs(convs: list[corpus.Conversation]) -> list[str]:
    texts = []
    for conv in convs:
        for m in conv.messages:
            if m.get("role") == "tool" and isinstance(m.get("content"), str) and m["content"]:
                texts.append(m["content"])
    return texts


def session(n_messages: int, texts: list[str], seed: int = 0) -> list[Message]:
    """An agent session of exactly `n_messages` messages, valid pairing, deterministic."""
    rng = random.Random(seed)
    messages: list[Message] = [{"role": "system", "content": SYSTEM}]
    turn = 0
    while len(messages) < n_messages:
        turn += 1
        if turn % 6 == 1:
            messages.append({"role": "user", "content": rng.choice(USER).format(n=turn)})
        command = rng.choice(COMMANDS).format(n=turn % 97)
        call_id = f"call_{turn}"
        args = orjson.dumps({"command": command, "cwd": f"/home/repo{turn % 7}"}).decode()
        call = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": args}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        lines = rng.choice(texts).split("\n")
        start = rng.randrange(max(1, len(lines) - MAX_LINES + 1))
        body = "\n".join(lines[start : start + MAX_LINES])[:MAX_CHARS]
        result = f"$ {command}\n{body}\n[exit code: {rng.choice((0, 0, 1, 2))}]"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        if turn % 3 == 0:
            messages.append({"role": "assistant", "content": REPLY.format(n=turn)})
    messages = messages[:n_messages]
    while messages[-1].get("role") == "assistant" and messages[-1].get("tool_calls"):
        messages.pop()  # never end on a call without its result
    messages.append({"role": "user", "content": "What is still failing?"})
    return messages


def timed(run: Any, *args: Any) -> tuple[float, float, Any]:
    """(CPU ms, wall ms, result)."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = run(*args)
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default=None, help="corpus dir (default: shared dev)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--reps", type=int, default=1, help="cold runs per cell (median)")
    parser.add_argument("--give-up", type=float, default=120.0, metavar="SECONDS")
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    corpus.setup_environment()
    overrides = corpus.overrides(args)
    texts = outputs(corpus.load(args.dir))
    encoding = corpus.tokenizers().for_model(corpus.MODEL).encoding
    assert encoding is not None
    print(f"tool outputs from {len(texts)} corpus results; cold: median of {args.reps}; CPU ms")
    print(
        f"{'window':>7}{'messages':>9}{'tokens':>11}{'MB':>6}{'enc':>7}{'cold':>8}{'wall':>8}"
        f"{'x2':>6}{'cold/enc':>9}{'warm':>8}{'warm/enc':>9}  plan"
    )
    raw: list[dict[str, Any]] = []
    for window in args.windows:
        settings = corpus.settings(context_window=window, **overrides)
        previous = None
        for size in args.sizes:
            messages = session(size, texts)
            body: dict[str, Any] = {"model": corpus.MODEL, "messages": messages}
            text = corpus.haystack(messages).replace("\0", "\n")
            colds, walls, encs, plan, sh = [], [], [], None, None
            for _ in range(args.reps):
                encs.append(timed(encoding.encode_ordinary, text)[0])
                sh = Shrinker(settings, corpus.tokenizers())  # encoding loaded, untimed
                cpu, wall, plan = timed(sh.plan_sync, body, "auto")
                colds.append(cpu)
                walls.append(wall)
            assert sh is not None and plan is not None
            cold, enc = statistics.median(colds), statistics.median(encs)
            warm = timed(sh.plan_sync, body, "auto")[0]
            r = plan.report
            ratio = f"{cold / previous:6.2f}" if previous else f"{'':>6}"
            print(
                f"{window:>7,}{size:>9,}{r.tokens_before:>11,}{len(text) / 1e6:>6.1f}{enc:>7.0f}"
                f"{cold:>8.0f}{statistics.median(walls):>8.0f}{ratio}{cold / enc:>9.2f}"
                f"{warm:>8.1f}{warm / enc:>9.3f}  -> {r.tokens_after:,} ({r.actions_header})",
                flush=True,
            )
            raw.append(
                {
                    "window": window,
                    "messages": size,
                    "tokens": r.tokens_before,
                    "chars": len(text),
                    "encode_cpu_ms": encs,
                    "cold_cpu_ms": colds,
                    "cold_wall_ms": walls,
                    "warm_cpu_ms": warm,
                    "tokens_after": r.tokens_after,
                    "actions": r.actions,
                }
            )
            previous = cold
            if statistics.median(walls) > args.give_up * 1000:
                print(f"{'':>7}cold plan over {args.give_up:g} s: larger sizes skipped")
                break
    corpus.write_json(args.json, raw)


if __name__ == "__main__":
    main()
