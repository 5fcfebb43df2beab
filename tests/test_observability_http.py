"""The proxy's own /metrics, /stats and /dashboard, fed by real requests through the proxy.

Acceptance test of the observability wiring (AppState.metrics, Exchange.log -> observe_request,
the in-flight middleware, the inbound key): the figures must match the x-shrink-* headers the
client saw.
"""

from __future__ import annotations

import os

import httpx
from prometheus_client.parser import text_string_to_metric_families

BIG_TOOL_OUTPUT = "\n".join(f"Collecting package-{i}==1.{i}.0 from cache" for i in range(3000))


def chat(proxy_url: str, *, stream: bool = False, headers: dict | None = None) -> httpx.Response:
    body = {
        "model": "obs-model",
        "stream": stream,
        "messages": [
            {"role": "user", "content": "install"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": BIG_TOOL_OUTPUT},
            {"role": "user", "content": "what failed?"},
        ],
    }
    return httpx.post(f"{proxy_url}/v1/chat/completions", json=body, headers=headers or {})


def saved_by(r: httpx.Response) -> int:
    return int(r.headers["x-shrink-tokens-before"]) - int(r.headers["x-shrink-tokens-after"])


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_requests_through_the_proxy_show_up_in_stats_and_metrics(proxy_url, upstream):
    plain = chat(proxy_url)
    streamed = chat(proxy_url, stream=True)
    assert plain.status_code == streamed.status_code == 200
    assert saved_by(plain) > 1000 and saved_by(streamed) == saved_by(plain)
    assert httpx.get(f"{proxy_url}/v1/models").status_code == 200
    failed = chat(proxy_url, headers={"x-fake-status": "503"})
    assert failed.status_code == 503

    s = httpx.get(f"{proxy_url}/stats").json()
    assert s["totals"]["requests"] == 4
    # The 503 reached the upstream too: its shrunk prompt was sent, so its savings count.
    assert s["totals"]["tokens_saved"] == 3 * saved_by(plain)
    assert [m["model"] for m in s["by_model"]] == ["obs-model"]
    assert s["by_stage"][0]["stage"] == "tools"
    assert [r["status"] for r in s["recent"]] == [503, 200, 200, 200]
    assert s["recent"][0]["error"] == "503"
    assert s["recent"][1]["route"] == "passthrough"
    assert s["totals"]["in_flight"] == 0

    text = httpx.get(f"{proxy_url}/metrics").text
    assert metric(text, "shrink_requests_total", route="chat", status="200") == 2
    assert metric(text, "shrink_tokens_saved_total", model="obs-model") == 3 * saved_by(plain)
    assert metric(text, "shrink_upstream_errors_total", code="503") == 1
    assert metric(text, "shrink_upstream_ttfb_seconds_count", route="chat") == 3
    assert metric(text, "shrink_cache_hits_total", cache="token_counts") > 0
    # The first request was cold with 120 KB of tool output: counted ahead on a spare core.
    helpers = metric(text, "shrink_count_ahead_helpers_total")
    assert helpers == (1 if (os.cpu_count() or 1) > 1 else 0)


def test_rejected_and_unreachable_requests_add_no_tokens(start_proxy):
    url = start_proxy(
        upstream_url="http://127.0.0.1:9/v1", context_window=512, cut_latest_user=False
    )
    huge = {"model": "m", "messages": [{"role": "user", "content": "word " * 5000}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=huge)
    assert r.status_code == 400  # too large even after shrinking: never sent
    assert chat(url).status_code == 502  # nothing listens on port 9
    s = httpx.get(f"{url}/stats").json()
    assert s["totals"]["requests"] == 2 and s["totals"]["tokens_before"] == 0
    assert [r["error"] for r in s["recent"]] == ["upstream_unavailable", "context_length_exceeded"]
    assert s["recent"][1]["tokens_before"] > 512  # the report is still shown


def test_observability_routes_require_the_inbound_key(start_proxy):
    url = start_proxy(proxy_api_key="inbound-key")
    for path in ("/metrics", "/stats", "/dashboard"):
        assert httpx.get(url + path).status_code == 401, path
        ok = httpx.get(url + path, headers={"authorization": "Bearer inbound-key"})
        assert ok.status_code == 200, path
    assert httpx.get(f"{url}/dashboard?key=inbound-key").status_code == 200
    assert httpx.get(f"{url}/dashboard?key=nope").status_code == 401
