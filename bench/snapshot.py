"""A snapshot of what the pipeline decides on the corpora, to prove a refactor changed nothing.

    .venv/bin/python -m bench.snapshot write FILE      # before the change
    .venv/bin/python -m bench.snapshot compare FILE    # after it: lists what differs, exit 1 if any

Covers every text of the dev corpus (contents and tool-call arguments), the generated toolchain
logs of tests/pipeline (several seeds) and bench/captured: stage 1's line scores and reading,
the facts' error lines, verdict and status, each message's fact candidates, compactions at two
budgets; and every turn of every dev conversation shrunk at four windows (a fresh Shrinker per
window, its caches kept across turns, as in the proxy). The snapshot file is JSON; a refactor
that keeps behaviour gives an identical one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench import corpus

WINDOWS = (32768, 16384, 8192, 4096)
BUDGETS = (409, 1024)
SEEDS = range(4)


def _digest(value: Any) -> str:
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def texts() -> Iterator[tuple[str, str]]:
    """(id, text) for every text the snapshot reads."""
    from bench.captured import load as captured
    from tests.pipeline import ecosystems

    for conv in corpus.load():
        for i, m in enumerate(conv.messages):
            content = m.get("content")
            parts = [content] if isinstance(content, str) else []
            if isinstance(content, list):
                parts += [p.get("text") for p in content if isinstance(p, dict)]
            for call in m.get("tool_calls") or []:
                parts.append((call.get("function") or {}).get("arguments"))
            for j, text in enumerate(parts):
                if isinstance(text, str) and text:
                    yield f"dev/{conv.id}/{i}/{j}", text
    for seed in SEEDS:
        for log in ecosystems.logs(seed):
            yield f"eco/{seed}/{log.name}", log.text
    for case, text in captured():
        yield f"captured/{case['id']}", text


def read_text(text: str, count: Any) -> dict[str, Any]:
    from proxy.pipeline import outcomes
    from proxy.pipeline.compact import compact_text
    from proxy.pipeline.compact.lines import read
    from proxy.pipeline.compact.runs import last_redraw
    from proxy.pipeline.compact.scoring import scores_and_repeats

    lines = [last_redraw(line) for line in text.split("\n")]
    scores, repeated = scores_and_repeats(lines)
    r = read(text)
    out: dict[str, Any] = {
        "scores": scores,
        "repeated": sorted(repeated),
        "reading": [r.plain, r.defs, r.what, r.share, _digest(r.scores)],
        "error_lines": outcomes.error_lines(text),
        "status": outcomes.status_line(text),
    }
    for budget in BUDGETS:
        done = compact_text(text, budget, count)
        out[f"compact{budget}"] = None if done is None else _digest(done.text)
    return out


def turns(conv: corpus.Conversation) -> Iterator[list[dict[str, Any]]]:
    for i, m in enumerate(conv.messages):
        if i and m.get("role") == "assistant":
            yield conv.messages[:i]
    yield conv.messages


def build() -> dict[str, Any]:
    from proxy.pipeline import facts
    from proxy.shrinker import Shrinker

    corpus.setup_environment()
    tk = corpus.tokenizers()
    count = tk.for_model(corpus.MODEL).count_text
    snap: dict[str, Any] = {}
    for key, text in texts():
        snap[f"text:{key}"] = read_text(text, count)
    for conv in corpus.load():
        for i, m in enumerate(conv.messages):
            snap[f"facts:{conv.id}/{i}"] = _digest(facts._candidates(m))
        for window in WINDOWS:
            shrinker = Shrinker(corpus.settings(context_window=window), tk)
            for n, messages in enumerate(turns(conv)):
                plan = shrinker.plan_sync(conv.request(messages), shrinker.policy.mode)
                r = plan.report
                snap[f"plan:{conv.id}/{window}/{n}"] = [
                    _digest(plan.messages),
                    r.tokens_before,
                    r.tokens_after,
                    r.actions_header,
                    r.fits,
                ]
    return snap


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for field in sorted(set(a) | set(b)):
                if a.get(field) != b.get(field):
                    x, y = a.get(field), b.get(field)
                    if field == "scores" and isinstance(x, list) and isinstance(y, list):
                        at = [i for i, (s, t) in enumerate(zip(x, y, strict=False)) if s != t]
                        diffs.append(f"{key} {field}: lines {at[:8]} ({len(at)} differ)")
                    else:
                        diffs.append(f"{key} {field}: {str(x)[:160]} -> {str(y)[:160]}")
        else:
            diffs.append(f"{key}: {str(a)[:160]} -> {str(b)[:160]}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["write", "compare"])
    parser.add_argument("file")
    args = parser.parse_args(argv)
    snap = orjson.loads(orjson.dumps(build()))  # tuples as lists, as the file holds them
    if args.action == "write":
        Path(args.file).write_bytes(orjson.dumps(snap))
        print(f"{len(snap)} entries written to {args.file}")
        return 0
    diffs = compare(json.loads(Path(args.file).read_bytes()), snap)
    for line in diffs:
        print(line)
    print(f"{len(snap)} entries, {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
