"""What `Shrinker.plan_sync` costs on a ~100k-token agent session, against tiktoken's own speed.

    .venv/bin/python -m bench.pipeline_cost [DIR]
        [--tokens 100000] [--reps 5] [--json FILE]

The session is several corpus conversations' messages concatenated after one system prompt
(tool-call ids renamed per conversation so pairing stays valid), whole conversations until the
target is reached. For each window it times, median of `--reps` runs:

  cold      fresh Tokenizers and Shrinker (the encoding file is loaded first, untimed, as the
            app's lifespan does at startup): every count and every compaction is new; the long
            tool results are counted ahead on a spare core when the machine has one
            (proxy.ahead), as the proxy does;
  cold1     the same on one core: no helper counts ahead;
  tool      after warm, a next turn that brings one new large tool result (the session's largest
            output with a line added): what an agent's turn costs most often, counting and
            compacting that one text (tool1: the same on one core; tenc: tiktoken encoding
            that text alone);
  warm      the same request again on the same Shrinker (the client retried);
  next      then the session plus one new user message (the next turn);
  python    the request again on the same counter with an empty memo: every token count is
            cached, every compaction, facts list and cut is computed anew, so this is the
            pipeline's own Python, the part of a cold request no tokenizer speed-up removes;

and, as yardsticks, a fresh TokenCounter counting the messages (no compaction, no trimming) and
tiktoken encoding the session's concatenated text (contents and tool-call
arguments) once. All five are interleaved rep by rep, so load from other processes (the machine is
shared) hits the yardstick and the pipeline alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import corpus
from bench.corpus import Conversation, Message
from proxy.ahead import CountAhead
from proxy.shrinker import CompactMemo, Shrinker
from proxy.tokens import CL100K, TokenCounter

WINDOWS = (32768, 16384, 8192)
NEW_TURN: Message = {"role": "user", "content": "Thanks. Now summarise what failed and why."}


def session(convs: list[Conversation], target: int, count: Callable[[Message], int]) -> Any:
    """One long, valid session: conversations appended whole until `target` tokens."""
    messages: list[Message] = [convs[0].messages[0]]
    tools = convs[0].tools
    total, used, rounds = count(messages[0]), [], 0
    while total < target:
        for n, conv in enumerate(convs):
            prefix = f"s{rounds}c{n}_"
            for m in conv.messages:
                if m.get("role") in ("system", "developer"):
                    continue
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [{**c, "id": prefix + c["id"]} for c in m["tool_calls"]]
                if m.get("role") == "tool":
                    m["tool_call_id"] = prefix + m["tool_call_id"]
                messages.append(m)
                total += count(m)
            used.append(conv.id)
            if total >= target:
                break
        rounds += 1
    return messages, tools, used, rounds


def timed(run: Callable[..., object], *args: Any) -> float:
    start = time.perf_counter()
    run(*args)
    return (time.perf_counter() - start) * 1000


def with_new_tool_result(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """`body` plus a turn whose tool result is new: its largest tool output, one line added."""
    outputs = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
    text = max((o for o in outputs if isinstance(o, str)), key=len) + "\n[run 2]"
    call = {"id": "call_new", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    turn = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_new", "content": text},
        NEW_TURN,
    ]
    return {**body, "messages": [*body["messages"], *turn]}, text


def measure(
    settings: Any, body: dict[str, Any], nxt: dict[str, Any], text: str, reps: int
) -> dict[str, float]:
    """Median ms of encode, count (a fresh counter over the messages: what any exact pipeline
    pays at least), cold, cold1, warm, next, tool, tool1, tenc and python, interleaved rep by
    rep so that load from other processes hits the yardstick and the pipeline alike."""
    fresh, new_text = with_new_tool_result(body)
    runs: dict[str, list[float]] = {
        "encode": [],
        "count": [],
        "cold": [],
        "cold1": [],
        "warm": [],
        "next": [],
        "tool": [],
        "tool1": [],
        "tenc": [],
        "python": [],
    }
    for _ in range(reps):
        tokenizers = corpus.tokenizers()  # loads cl100k_base: startup work, not timed
        encoding = tokenizers.for_model(corpus.MODEL).encoding
        assert encoding is not None
        sh = Shrinker(settings, tokenizers)
        runs["encode"].append(timed(encoding.encode_ordinary, text))
        runs["count"].append(timed(TokenCounter(CL100K, encoding).count_messages, body["messages"]))
        runs["cold"].append(timed(sh.plan_sync, body, "auto"))
        alone = Shrinker(settings, corpus.tokenizers())
        alone.ahead = CountAhead(1)
        runs["cold1"].append(timed(alone.plan_sync, body, "auto"))
        runs["warm"].append(timed(sh.plan_sync, body, "auto"))
        runs["next"].append(timed(sh.plan_sync, nxt, "auto"))
        runs["tenc"].append(timed(encoding.encode_ordinary, new_text))
        runs["tool"].append(timed(sh.plan_sync, fresh, "auto"))
        runs["tool1"].append(timed(alone.plan_sync, fresh, "auto"))
        sh.memo = CompactMemo(sh.memo.capacity, sh.memo.max_chars)
        runs["python"].append(timed(sh.plan_sync, body, "auto"))
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default=None, help="corpus dir (default: shared dev)")
    parser.add_argument("--tokens", type=int, default=100_000, help="session size to build")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    args = parser.parse_args()
    corpus.setup_environment()
    convs = corpus.load(args.dir)
    start = time.perf_counter()
    shared = corpus.tokenizers()
    load_ms = (time.perf_counter() - start) * 1000
    counter = shared.for_model(corpus.MODEL)
    messages, tools, used, rounds = session(convs, args.tokens, counter.count_message)
    body: dict[str, Any] = {"model": corpus.MODEL, "messages": messages, "tools": tools}
    nxt = {**body, "messages": [*messages, NEW_TURN]}
    text = corpus.haystack(messages).replace("\0", "\n")
    tokens = counter.count_messages(messages) + counter.count_tools(tools)
    print(
        f"session: {len(messages)} messages, {tokens:,} tokens, {len(text):,} chars, from "
        f"{len(used)} conversations ({', '.join(used)})"
        + (f"; corpus repeated {rounds} times" if rounds > 1 else "")
    )
    print(f"cl100k_base load (startup, once per process): {load_ms:.0f} ms")
    print(f"median of {args.reps} interleaved runs; enc = tiktoken encoding the text once")
    print(
        f"\n{'window':>8}{'enc ms':>9}{'count ms':>9}{'cold ms':>9}{'cold1 ms':>9}{'warm ms':>9}"
        f"{'next ms':>9}{'py ms':>8}{'cold/enc':>10}{'cold1/enc':>10}{'warm/enc':>10}"
        f"{'next/enc':>10}{'py/enc':>8}{'tenc ms':>9}{'tool ms':>9}{'tool1 ms':>9}"
        f"{'tool/tenc':>10}{'tool1/tenc':>11}  plan"
    )
    raw: dict[str, Any] = {
        "messages": len(messages),
        "tokens": tokens,
        "chars": len(text),
        "conversations": used,
        "load_ms": load_ms,
        "reps": args.reps,
        "windows": {},
    }
    for window in WINDOWS:
        settings = corpus.settings(context_window=window)
        t = measure(settings, body, nxt, text, args.reps)
        report = Shrinker(settings, shared).plan_sync(body, "auto").report
        enc = t["encode"]
        print(
            f"{window:>8,}{enc:>9.1f}{t['count']:>9.1f}{t['cold']:>9.1f}{t['cold1']:>9.1f}"
            f"{t['warm']:>9.1f}{t['next']:>9.1f}{t['python']:>8.1f}{t['cold'] / enc:>10.2f}"
            f"{t['cold1'] / enc:>10.2f}{t['warm'] / enc:>10.3f}{t['next'] / enc:>10.3f}"
            f"{t['python'] / enc:>8.2f}{t['tenc']:>9.1f}{t['tool']:>9.1f}{t['tool1']:>9.1f}"
            f"{t['tool'] / t['tenc']:>10.2f}{t['tool1'] / t['tenc']:>11.2f}"
            f"  {report.tokens_before:,} -> {report.tokens_after:,} ({report.actions_header})"
        )
        raw["windows"][str(window)] = {
            **{f"{k}_ms": v for k, v in t.items()},
            "tokens_after": report.tokens_after,
            "actions": report.actions,
        }
    corpus.write_json(args.json, raw)


if __name__ == "__main__":
    main()
