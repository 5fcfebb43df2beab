"""Nothing lost: on the dev corpus, every needle is in the shrunk request or behind a ref it names.

    .venv/bin/python -m bench.retrieval [DIR] [--windows 16384,8192,4096] [--json FILE]

Each conversation is shrunk as /v1/chat/completions shrinks it, with retrieval off and on. A
needle is *visible* when its answer is in the shrunk request (bench.quality's test), and
*recoverable* when it is visible or in the original behind a ref the shrunk request names
(`Retrieve more: hash=`), as the store holds it: a tool result as sent, a dropped span as its
transcript. Also: what the refs cost in tokens, and the store's size once every ref of the
corpus is kept (characters, and the bytes tracemalloc sees it hold).
"""

from __future__ import annotations

import argparse
import asyncio
import tracemalloc
from typing import Any

from bench import corpus
from bench.corpus import Conversation
from proxy.pipeline.dialect import CHAT
from proxy.pipeline.refs import refs_in
from proxy.pipeline.summary import full_transcript
from proxy.retrieval.keep import keep
from proxy.retrieval.store import MemoryStore
from proxy.shrinker import Shrinker

WINDOWS = (16384, 8192, 4096)


def measure(convs: list[Conversation], window: int) -> dict[str, Any]:
    off = Shrinker(corpus.settings(context_window=window, retrieve=False), corpus.tokenizers())
    on = Shrinker(corpus.settings(context_window=window, retrieve=True), corpus.tokenizers())
    row = dict.fromkeys(("needles", "visible_off", "visible_on", "recoverable"), 0)
    row |= dict.fromkeys(("tokens_off", "tokens_on", "refs", "named", "tool"), 0)
    store = MemoryStore(max_items=1 << 20, max_bytes=1 << 40)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for conv in convs:
        plan_off = off.plan_sync(conv.request(), "auto")
        plan = on.plan_sync(conv.request(), "auto")
        hay_off, hay = corpus.haystack(plan_off.messages), corpus.haystack(plan.messages)
        named = set(refs_in(hay))
        assert named <= set(plan.refs), "a marker names a ref the plan does not keep"
        behind = [
            v if isinstance(v, str) else full_transcript(v)
            for k, v in plan.refs.items()
            if k in named
        ]
        asyncio.run(keep(store, plan, CHAT))  # the dev corpus is in Chat Completions' shape
        for needle in conv.needles:
            row["needles"] += 1
            row["visible_off"] += needle.answer in hay_off
            row["visible_on"] += needle.answer in hay
            row["recoverable"] += needle.answer in hay or any(needle.answer in t for t in behind)
        row["tokens_off"] += plan_off.report.tokens_after
        row["tokens_on"] += plan.report.tokens_after
        row["refs"] += len(plan.refs)
        row["named"] += len(named)
        row["tool"] += plan.retrieval_tool
    row["store_bytes"] = store.bytes  # as the store counts them (sys.getsizeof)
    row["traced_bytes"] = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    row["window"] = window
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    run = corpus.start(parser)
    rows = []
    print(f"{len(run.convs)} conversations; a needle is recoverable when visible or behind a ref")
    print("window  needles  visible off  visible on  recoverable  tokens off -> on   refs  store")
    for window in run.args.windows:
        r = measure(run.convs, window)
        rows.append(r)
        n = r["needles"]
        print(
            f"{window:>6}  {n:>7}  {r['visible_off']:>11}  {r['visible_on']:>10}  "
            f"{r['recoverable']:>5}/{n:<5}  {r['tokens_off']:>8,} -> {r['tokens_on']:<8,} "
            f"{r['named']:>4}  {r['store_bytes'] / 1e6:.2f} MB counted, "
            f"{r['traced_bytes'] / 1e6:.2f} MB traced"
        )
    corpus.write_json(run.args.json, rows)


if __name__ == "__main__":
    main()
