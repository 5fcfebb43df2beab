"""What the per-message count cache buys on real agent conversations. Prints figures only.

For the largest corpus conversations: counting the whole conversation cold (empty cache), warm (the
same messages again), and "turn k+1" (all k messages seen, one new message appended), against the
baseline of tiktoken encoding the concatenated text once. Also count_text on a long text, cold vs
warm, which is why texts >= TEXT_CACHE_MIN_CHARS go through the cache. And what a cache key
costs: each of hashlib's digests (and Python's own hash(), which keys must not rely on alone:
proxy/pipeline/keys.py) over texts of 1 KB to 1 MB, English and CJK, against tiktoken encoding
them. Median of several runs.

    .venv/bin/python bench/tokens_cache.py [corpus]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.tokenizers import Tokenizers, resolve_cache_dir  # noqa: E402
from proxy.tokens import TEXT_CACHE_MIN_CHARS, TokenCounter, text_key  # noqa: E402
from tests.shared_dir import DEV_CORPUS, use_offline_encodings  # noqa: E402

T = TypeVar("T")


def median_ms(fn: Callable[[T], Any], setup: Callable[[], T], reps: int) -> float:
    """Median wall time of fn(setup()), setup not timed."""
    times = []
    for _ in range(reps):
        arg = setup()
        start = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def flat_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in m.get("tool_calls") or []:
            parts.append(call["function"]["name"] + call["function"]["arguments"])
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", default=str(DEV_CORPUS))
    parser.add_argument("--top", type=int, default=5, help="how many of the largest conversations")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--model", default="gpt-4o")
    args = parser.parse_args()
    use_offline_encodings()

    shared = Tokenizers(cache_dir=resolve_cache_dir(os.environ)).for_model(args.model)
    if not shared.exact:
        print(f"warning: {shared.note}; figures below are for the estimate")

    files = sorted(Path(args.corpus).glob("*.json"), key=lambda p: p.stat().st_size, reverse=True)
    print(f"encoding {shared.name}; median of {args.reps} runs; times in ms")
    print(
        f"{'conversation':<44}{'msgs':>5}{'tokens':>8}{'encode':>8}"
        f"{'cold':>8}{'warm':>8}{'turn+1':>8}{'cold/enc':>9}{'enc/warm':>9}{'enc/turn':>9}"
    )
    for path in files[: args.top]:
        bench_conversation(path, shared, args.reps)

    print("\ncount_text, one text cold (fresh counter) vs warm (cached):")
    text = flat_text(json.loads(files[0].read_bytes())["messages"])
    for size in (256, 1024, 4096, 32768, len(text)):
        bench_text(text[:size], shared, args.reps)
    bench_keys(text, shared, args.reps)


def fresh(shared: TokenCounter) -> TokenCounter:
    """An empty cache around the already-loaded encoding."""
    return TokenCounter(shared.name, shared.encoding)


def bench_conversation(path: Path, shared: TokenCounter, reps: int) -> None:
    messages: list[dict[str, Any]] = json.loads(path.read_bytes())["messages"]
    head, turn = messages[:-1], messages
    text = flat_text(messages)
    encoding = shared.encoding

    def warmed(seen: list[dict[str, Any]]) -> TokenCounter:
        counter = fresh(shared)
        counter.count_messages(seen)
        return counter

    if encoding is not None:
        t_enc = median_ms(lambda _: encoding.encode_ordinary(text), lambda: None, reps)
    else:
        t_enc = float("nan")
    t_cold = median_ms(lambda c: c.count_messages(messages), lambda: fresh(shared), reps)
    t_warm = median_ms(lambda c: c.count_messages(messages), lambda: warmed(messages), reps)
    t_turn = median_ms(lambda c: c.count_messages(turn), lambda: warmed(head), reps)
    print(
        f"{path.stem[:43]:<44}{len(messages):>5}{shared.count_messages(messages):>8}{t_enc:>8.2f}"
        f"{t_cold:>8.2f}{t_warm:>8.2f}{t_turn:>8.2f}"
        f"{t_cold / t_enc:>9.2f}{t_enc / t_warm:>9.1f}{t_enc / t_turn:>9.1f}"
    )


def bench_text(chunk: str, shared: TokenCounter, reps: int) -> None:
    def warmed() -> TokenCounter:
        counter = fresh(shared)
        counter.count_text(chunk)
        return counter

    t_cold = median_ms(lambda c: c.count_text(chunk), lambda: fresh(shared), reps)
    t_warm = median_ms(lambda c: c.count_text(chunk), warmed, reps)
    cached = "cached" if len(chunk) >= TEXT_CACHE_MIN_CHARS else "not cached"
    print(
        f"  {len(chunk):>7} chars: cold {t_cold * 1000:8.1f} us  warm {t_warm * 1000:8.1f} us  "
        f"x{t_cold / t_warm:5.1f}  ({cached})"
    )


DIGESTS = ("sha256", "sha1", "blake2b", "blake2s", "md5", "sha512", "sha3_256")


def best_us(fn: Callable[[], Any], n: int, reps: int) -> float:
    """Best over `reps` runs of the mean microseconds of n calls."""
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def key_row(chunk: str, shared: TokenCounter, reps: int) -> list[float]:
    """encode, hash() of a new str, text_key, then each digest over the text's bytes (us)."""
    data = chunk.encode()
    n = max(3, (1 << 22) // len(chunk))
    encoding = shared.encoding
    assert encoding is not None
    fresh = iter([data.decode() for _ in range(n * reps)])  # a str caches its hash()
    row = [best_us(lambda: encoding.encode_ordinary(chunk), max(1, n // 16), reps)]
    row += [best_us(lambda: hash(next(fresh)), n, reps), best_us(lambda: text_key(chunk), n, reps)]
    for name in DIGESTS:
        row.append(best_us(lambda name=name: hashlib.new(name, data).digest(), n, reps))
    return row


def bench_keys(text: str, shared: TokenCounter, reps: int) -> None:
    """Microseconds per key of one text: tiktoken's encode (for reference), hash() of a new
    str (what a parsed request holds), our text_key (UTF-8 and SHA-256), each digest."""
    cjk = "错误：无法找到模块，请检查路径与版本。构建失败，测试通过。" * 64
    print(f"\ncache keys, us per text (best of {reps}):")
    header = f"{'text':<12}{'encode':>10}{'hash()':>9}{'text_key':>9}"
    print(header + "".join(f"{name:>10}" for name in DIGESTS))
    for name, source in (("en", text), ("cjk", cjk)):
        while len(source) < 1 << 20:
            source += source
        for size in (1 << 10, 1 << 14, 1 << 18, 1 << 20):
            encode, siphash, key, *digests = key_row(source[:size], shared, reps)
            cells = f"{encode:>10.0f}{siphash:>9.1f}{key:>9.1f}"
            print(
                f"{f'{name} {size // 1024} KB':<12}{cells}"
                + "".join(f"{d:>10.1f}" for d in digests)
            )


if __name__ == "__main__":
    main()
