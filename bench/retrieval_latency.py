"""What the in-flight retrieval loop costs in latency, on loopback.

`python -m bench.retrieval_latency [--runs 15] [--chunk-ms 20]`

The proxy (uvicorn, in this process's threads) in front of the scripted upstream of
tests/fakes/retriever.py, which streams each event `--chunk-ms` apart and, when the request
offers `shrink_retrieve` and names a hash, calls it once before it answers. The request is an
agent's turn whose 400-line tool result is compacted (its marker names the hash).

- time to first content byte of a stream, retrieval on (the model's first round) vs off
  (`x-shrink-retrieve: off`): content is never held, so the two should match;
- one retrieval round, non-stream and unpaced: a request served in two upstream calls minus
  the same request answered in one, and the proxy's own part of it (that minus one direct
  upstream call of the continuation's size).

Medians over `--runs`, each kind interleaved so the machine's noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.app import create_app  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from tests.fakes.retriever import FakeRetriever  # noqa: E402
from tests.fakes.server import serve  # noqa: E402
from tests.shared_dir import use_offline_encodings  # noqa: E402
from tests.test_shrink_http import BIG_LOG, conversation  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
BODY = {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": TOOLS}
OFF = {"x-shrink-retrieve": "off"}


def first_content(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[float, float]:
    """(seconds to the first content delta, to the end) of one stream."""
    started = time.perf_counter()
    first = None
    with client.stream("POST", url, json={**BODY, "stream": True}, headers=headers) as r:
        for line in r.iter_lines():
            if first is None and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter() - started
    assert first is not None, "no content"
    return first, time.perf_counter() - started


def timed(client: httpx.Client, url: str, body: dict, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    r = client.post(url, json=body, headers=headers)
    assert r.status_code == 200, r.text
    return time.perf_counter() - started


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--chunk-ms", type=float, default=20.0)
    args = parser.parse_args()
    runs = max(1, min(args.runs, 100))
    use_offline_encodings()
    fake = FakeRetriever()
    with (
        serve(fake.app()) as upstream,
        serve(
            create_app(
                Settings(upstream_url=upstream + "/v1", discover_window=False, tool_max_tokens=256)
            )
        ) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        url = proxy + "/v1/chat/completions"
        paced = {"x-script-chunk-delay": str(args.chunk_ms / 1000)}
        for _ in range(2):  # warm: encodings, connections
            first_content(client, url, paced)
            timed(client, url, BODY, OFF)
        on: list[float] = []
        off: list[float] = []
        on_total: list[float] = []
        off_total: list[float] = []
        for _ in range(runs):
            a, b = first_content(client, url, paced)
            on.append(a)
            on_total.append(b)
            a, b = first_content(client, url, {**paced, **OFF})
            off.append(a)
            off_total.append(b)
        one: list[float] = []
        two: list[float] = []
        direct: list[float] = []
        fake.reset()
        timed(client, url, BODY, {})
        continuation = fake.requests[-1].body  # what the proxy sent in the second round
        for _ in range(runs):
            two.append(timed(client, url, BODY, {}))
            one.append(timed(client, url, BODY, OFF))
            started = time.perf_counter()
            client.post(upstream + "/v1/chat/completions", content=continuation)
            direct.append(time.perf_counter() - started)
    print(f"retrieval latency, {runs} runs each, medians; stream events {args.chunk_ms:g} ms apart")
    print(f"  first content byte, retrieval on : {ms(on)}")
    print(f"  first content byte, retrieval off: {ms(off)}")
    ratio = statistics.median(on) / statistics.median(off)
    print(f"  on / off                         : {ratio:8.2f}x")
    print(f"  whole stream on (two rounds)     : {ms(on_total)}")
    print(f"  whole stream off (one round)     : {ms(off_total)}")
    round_cost = [b - a for a, b in zip(one, two, strict=True)]
    own = [r - d for r, d in zip(round_cost, direct, strict=True)]
    print(f"  non-stream, one round (2 calls)  : {ms(two)}")
    print(f"  non-stream, no round (1 call)    : {ms(one)}")
    print(f"  one retrieval round adds         : {ms(round_cost)}")
    print(f"  of which the proxy's own work    : {ms(own)} (minus one direct upstream call)")


if __name__ == "__main__":
    main()
