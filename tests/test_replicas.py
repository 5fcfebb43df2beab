"""Two real proxy processes sharing state through a real redis-server (`SHRINK_STORE_URL`).

What a user of the compose profile `replicas` relies on: a summary one replica paid a model call
for is a cache hit on the other; a hash issued through one is served by the other's
`GET /v1/retrieve/{hash}`; Redis killed in the middle of a load loses no request (the
metrics show the outage) and is used again once it is back; a Redis that accepts and never
answers costs a request at most the store's timeout, once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.pipeline.refs import refs_in, text_ref
from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer
from tests.proxy_process import ProxyProcess, proxy_process
from tests.redis_server import RedisServer, redis_server, silent_server
from tests.test_shrink_http import BIG_LOG, conversation

pytestmark = pytest.mark.redis

SUMMARY_KEYS = b"shrink:v1:summary:*"


@pytest.fixture(scope="module")
def summarizer() -> Iterator[FakeSummarizer]:
    fake = FakeSummarizer()
    with serve(fake.app()) as url:
        fake.url = url
        yield fake


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:  # one per test: some tests kill it
        yield server


@contextmanager
def replicas(upstream, store_url: str, summarizer, n: int = 2, **env: str):
    settings = {
        "SHRINK_STORE_URL": store_url,
        "SHRINK_SUMMARY_URL": summarizer.url + "/v1",
        "SHRINK_CONTEXT_WINDOW": "8192",
        "SHRINK_TOOL_MAX_TOKENS": "256",
        "SHRINK_COMPLETION_RESERVE": "512",
        "SHRINK_DISCOVER_WINDOW": "false",
        "SHRINK_STORE_RETRY": "0.2",
        **env,
    }
    with ExitStack() as stack:
        yield [
            stack.enter_context(proxy_process(upstream.url + "/v1", env=settings)) for _ in range(n)
        ]


def chat(proxy: ProxyProcess, msgs: list[dict], timeout: float = 30) -> httpx.Response:
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "fake-model", "messages": msgs},
        timeout=timeout,
    )
    assert r.status_code == 200, r.text
    return r


def metric(proxy: ProxyProcess, name: str, **labels: str) -> float:
    text = httpx.get(proxy.url + "/metrics").text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def keys(redis: RedisServer, pattern: bytes = SUMMARY_KEYS) -> int:
    reply = redis.command(b"KEYS", pattern)
    return int(reply[1:].split(b"\r\n", 1)[0]) if reply.startswith(b"*") else 0


def wait_for(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def unique(msgs: list[dict], tag: str) -> list[dict]:
    """The same conversation with its first user message made distinct: a span never seen."""
    out = [dict(m) for m in msgs]
    out[1]["content"] = f"{tag}: {out[1]['content']}"
    return out


def test_a_summary_made_through_one_replica_is_a_cache_hit_on_the_other(
    upstream, redis, summarizer
):
    summarizer.reset()
    msgs = conversation(40)
    with replicas(upstream, redis.url, summarizer) as (one, two):
        first = chat(one, msgs)
        assert "summary:1" in first.headers["x-shrink-actions"]
        sent_by_one = upstream.last.json()["messages"]
        assert len(summarizer.requests) == 1
        wait_for(lambda: keys(redis) == 1)  # written behind
        second = chat(two, msgs)
        assert "summary:1" in second.headers["x-shrink-actions"]
        assert len(summarizer.requests) == 1  # no second model call
        assert upstream.last.json()["messages"] == sent_by_one  # byte-identical note
        assert metric(two, "shrink_summarizer_calls_total", outcome="cache") == 1
        assert metric(two, "shrink_store_up") == 1


def test_a_hash_issued_through_one_replica_is_served_by_the_other(upstream, redis, summarizer):
    with replicas(upstream, redis.url, summarizer) as (one, two):
        chat(one, conversation(1, BIG_LOG))
        (ref,) = refs_in(upstream.last.json()["messages"][3]["content"])
        assert ref == text_ref(BIG_LOG)
        # Written before the request went upstream: no wait for a write behind.
        page = httpx.get(
            f"{two.url}/v1/retrieve/{ref}", params={"max_bytes": 10**6, "max_lines": 1000}
        ).json()
        assert page["text"] == BIG_LOG and page["hash"] == ref
        assert keys(redis, b"shrink:v1:ref:*") == 1
        unknown = httpx.get(f"{two.url}/v1/retrieve/{'0' * 24}")
        assert unknown.status_code == 404 and "any replica" in unknown.json()["error"]["message"]


def test_redis_killed_mid_load_loses_no_request_and_is_used_again_when_back(
    upstream, redis, summarizer
):
    summarizer.reset()
    base = conversation(40)
    with replicas(upstream, redis.url, summarizer) as pair:
        chat(pair[0], unique(base, "warm"))  # connections open, a key written
        wait_for(lambda: keys(redis) == 1)

        def one(i: int) -> tuple[int, float]:
            began = time.monotonic()
            r = httpx.post(
                pair[i % 2].url + "/v1/chat/completions",
                json={"model": "fake-model", "messages": unique(base, f"load {i}")},
                timeout=30,
            )
            return r.status_code, time.monotonic() - began

        with ThreadPoolExecutor(8) as pool:
            running = [pool.submit(one, i) for i in range(80)]
            while sum(f.done() for f in running) < 20:
                time.sleep(0.01)
            redis.kill()  # SIGKILL, mid-load
            results = [f.result() for f in running]
        assert [status for status, _ in results] == [200] * 80
        print("request seconds, Redis killed after 20 of 80:", sorted(t for _, t in results)[-3:])
        for proxy in pair:
            assert metric(proxy, "shrink_store_up") == 0
            assert metric(proxy, "shrink_store_outages_total") == 1
            assert metric(proxy, "shrink_store_fallbacks_total") > 0
            assert proxy.log().count("unavailable") == 1  # logged once per outage
        # Back (empty, on the same port): each replica reconnects and writes to it again.
        redis.start()
        wait_for(lambda: all(metric(p, "shrink_store_up") == 1 for p in pair))
        chat(pair[1], unique(base, "after"))
        wait_for(lambda: keys(redis) == 1)
        assert "is back" in pair[1].log()


def test_a_redis_that_never_answers_costs_a_request_one_timeout_at_most(upstream, summarizer):
    summarizer.reset()
    base = conversation(40)
    with (
        silent_server() as hung,
        replicas(upstream, hung.url, summarizer, n=1, SHRINK_STORE_TIMEOUT="0.5") as (proxy,),
    ):
        times = []
        for i in range(8):
            began = time.monotonic()
            r = chat(proxy, unique(base, f"hung {i}"))
            times.append(time.monotonic() - began)
            assert "summary:1" in r.headers["x-shrink-actions"]  # the model still asked
        assert times[0] < 0.5 + 2.0, times
        # Known down after the first: the others do not wait for Redis at all.
        assert sorted(times[1:])[3] < 0.45, times
        assert metric(proxy, "shrink_store_up") == 0
        # The first request's read and the startup's background refresh of windows and
        # calibration may both be waiting when the first of them times out.
        assert 1 <= metric(proxy, "shrink_store_fallbacks_total", reason="timeout") <= 2
        assert metric(proxy, "shrink_store_fallbacks_total", reason="down") >= 7
        assert proxy.log().count("unavailable") == 1
        print("request seconds with a hung Redis:", [round(t, 3) for t in times])
