"""bench.overhead --experiment retrieval reads the retrieval store's figures off a real proxy's
/metrics (uvicorn on 127.0.0.1) after a request whose tool result was compacted."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import urlparse

import httpx

from bench.overhead.report import scraped
from tests.test_shrink_http import BIG_LOG, conversation


def test_the_store_s_entries_bytes_and_evictions_are_read(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256)
    server = SimpleNamespace(port=urlparse(url).port)
    assert scraped(server, "shrink_cache_entries", cache="retrieval") == 0  # type: ignore[arg-type]
    body = {"model": "fake-model", "messages": conversation(1, BIG_LOG)}
    assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 200
    assert scraped(server, "shrink_cache_entries", cache="retrieval") == 1  # type: ignore[arg-type]
    held = scraped(server, "shrink_retrieval_store_bytes")  # type: ignore[arg-type]
    assert held is not None and held > len(BIG_LOG)
    assert scraped(server, "shrink_retrieval_store_evicted_total") == 0  # type: ignore[arg-type]
    assert scraped(server, "shrink_no_such_metric") is None  # type: ignore[arg-type]
