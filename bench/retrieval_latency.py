"""What the in-flight retrieval loop costs in latency, on loopback, on each API that has it.

`python -m bench.retrieval_latency [--runs 15] [--chunk-ms 20] [--api chat|messages|responses]`

The proxy (uvicorn, in this process's threads) in front of a scripted upstream
(tests/fakes/retriever.py, retriever_messages.py, retriever_responses.py), which streams each
event `--chunk-ms` apart and, when the request offers `shrink_retrieve` and names a hash, calls
it once before it answers. The request is an agent's turn whose 400-line tool result is
compacted (its marker names the hash), in the API's own shape.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.responses_form import to_responses  # noqa: E402
from proxy.app import create_app  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from tests.fakes.retriever import FakeRetriever  # noqa: E402
from tests.fakes.retriever_messages import FakeMessagesRetriever  # noqa: E402
from tests.fakes.retriever_responses import FakeResponsesRetriever  # noqa: E402
from tests.fakes.server import serve  # noqa: E402
from tests.shared_dir import use_offline_encodings  # noqa: E402
from tests.test_retrieval_loop_messages import request as messages_request  # noqa: E402
from tests.test_shrink_http import BIG_LOG, conversation  # noqa: E402

CHAT_TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
CHAT_BODY = {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": CHAT_TOOLS}
OFF = {"x-shrink-retrieve": "off"}


@dataclass(frozen=True)
class Api:
    name: str
    path: str  # under the proxy's and the upstream's root
    body: dict[str, Any]
    fake: Callable[[], Any]
    text: Callable[[str], bool]  # whether a stream's line holds the model's text


def chat_text(line: str) -> bool:
    return '"content":"' in line and '"content":""' not in line


APIS = {
    "chat": Api("chat", "/v1/chat/completions", CHAT_BODY, FakeRetriever, chat_text),
    "messages": Api(
        "messages",
        "/v1/messages",
        messages_request(),
        FakeMessagesRetriever,
        lambda line: '"text_delta"' in line,
    ),
    # A stream the server does not store: the only kind the tool goes with on Responses.
    "responses": Api(
        "responses",
        "/v1/responses",
        {**to_responses(CHAT_BODY), "store": False},
        FakeResponsesRetriever,
        lambda line: '"response.output_text.delta"' in line,
    ),
}


def first_content(
    client: httpx.Client, api: Api, url: str, headers: dict[str, str]
) -> tuple[float, float]:
    """(seconds to the first event holding the model's text, to the end) of one stream."""
    started = time.perf_counter()
    first = None
    with client.stream("POST", url, json={**api.body, "stream": True}, headers=headers) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if first is None and api.text(line):
                first = time.perf_counter() - started
    assert first is not None, "no content"
    return first, time.perf_counter() - started


def timed(client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str]) -> float:
    started = time.perf_counter()
    r = client.post(url, json=body, headers=headers)
    assert r.status_code == 200, r.text
    return time.perf_counter() - started


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.2f} ms"


def measure(api: Api, runs: int, chunk_ms: float) -> dict[str, list[float]]:
    fake = api.fake()
    settings = {"discover_window": False, "tool_max_tokens": 256}
    out: dict[str, list[float]] = {
        k: [] for k in ("on", "off", "on_total", "off_total", "two", "one", "direct")
    }
    with (
        serve(fake.app()) as upstream,
        serve(create_app(Settings(upstream_url=upstream + "/v1", **settings))) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        url = proxy + api.path
        paced = {"x-script-chunk-delay": str(chunk_ms / 1000)}
        for _ in range(2):  # warm: encodings, connections
            first_content(client, api, url, paced)
            timed(client, url, api.body, OFF)
        for _ in range(runs):
            a, b = first_content(client, api, url, paced)
            out["on"].append(a)
            out["on_total"].append(b)
            a, b = first_content(client, api, url, {**paced, **OFF})
            out["off"].append(a)
            out["off_total"].append(b)
        fake.reset()
        timed(client, url, api.body, {})
        assert len(fake.requests) == 2, "the scripted model did not call shrink_retrieve"
        continuation = fake.requests[-1].body  # what the proxy sent in the second round
        for _ in range(runs):
            out["two"].append(timed(client, url, api.body, {}))
            out["one"].append(timed(client, url, api.body, OFF))
            started = time.perf_counter()
            client.post(upstream + api.path, content=continuation)
            out["direct"].append(time.perf_counter() - started)
    return out


def report(api: Api, f: dict[str, list[float]]) -> None:
    print(f"== {api.name} ({api.path})")
    print(f"  first content byte, retrieval on : {ms(f['on'])}")
    print(f"  first content byte, retrieval off: {ms(f['off'])}")
    ratio = statistics.median(f["on"]) / statistics.median(f["off"])
    print(f"  on / off                         : {ratio:8.2f}x")
    print(f"  whole stream on (two rounds)     : {ms(f['on_total'])}")
    print(f"  whole stream off (one round)     : {ms(f['off_total'])}")
    round_cost = [b - a for a, b in zip(f["one"], f["two"], strict=True)]
    own = [r - d for r, d in zip(round_cost, f["direct"], strict=True)]
    print(f"  non-stream, one round (2 calls)  : {ms(f['two'])}")
    print(f"  non-stream, no round (1 call)    : {ms(f['one'])}")
    print(f"  one retrieval round adds         : {ms(round_cost)}")
    print(f"  of which the proxy's own work    : {ms(own)} (minus one direct upstream call)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--chunk-ms", type=float, default=20.0)
    parser.add_argument("--api", choices=sorted(APIS), action="append", help="default: all")
    args = parser.parse_args(argv)
    runs = max(1, min(args.runs, 100))
    use_offline_encodings()
    print(f"retrieval latency, {runs} runs each, medians; stream events {args.chunk_ms:g} ms apart")
    for name in args.api or list(APIS):
        report(APIS[name], measure(APIS[name], runs, args.chunk_ms))


if __name__ == "__main__":
    main()
