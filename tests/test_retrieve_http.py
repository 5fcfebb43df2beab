"""Refs over real HTTP: the originals behind every marker are kept before the request goes
upstream, `GET /v1/retrieve/{hash}` serves them (pages, search, errors in OpenAI's shape),
and an agent's request gets the `shrink_retrieve` tool only when its messages name a ref."""

from __future__ import annotations

import httpx

from proxy.pipeline.refs import refs_in, text_ref
from proxy.retrieval.tool import CHAT_TOOL, NAME
from tests.test_observability_http import metric
from tests.test_shrink_http import BIG_LOG, conversation

TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


def post(url: str, body: dict, **headers: str) -> httpx.Response:
    r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r


def test_a_compacted_result_is_retrievable_whole_by_its_hash(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256)
    post(url, {"model": "fake-model", "messages": conversation(1, BIG_LOG)})
    sent = upstream.last.json()["messages"][3]["content"]
    (ref,) = refs_in(sent)
    assert ref == text_ref(BIG_LOG) and "tools" not in upstream.last.json()
    page = httpx.get(
        f"{url}/v1/retrieve/{ref}", params={"max_bytes": 10**6, "max_lines": 1000}
    ).json()
    assert page["text"] == BIG_LOG and page["total_lines"] == 402 and page["hash"] == ref
    assert page["next_start_line"] is None
    some = httpx.get(f"{url}/v1/retrieve/{ref}", params={"start_line": 10, "max_lines": 5})
    assert some.json()["text"].splitlines() == BIG_LOG.splitlines()[9:14]
    assert some.json()["next_start_line"] == 15 and some.json()["truncated_by"] == "lines"
    found = httpx.get(f"{url}/v1/retrieve/{ref}", params={"search": "no matching"}).json()
    assert found["matches"] == 1 and found["text"].startswith("401: ERROR: No matching")


def test_unknown_and_malformed_hashes_get_errors_in_openai_shape(start_proxy):
    url = start_proxy(proxy_api_key="k")
    r = httpx.get(f"{url}/v1/retrieve/{'0' * 24}")
    assert r.status_code == 401
    auth = {"authorization": "Bearer k"}
    r = httpx.get(f"{url}/v1/retrieve/{'0' * 24}", headers=auth)
    assert r.status_code == 404 and r.json()["error"]["code"] == "hash_not_found"
    r = httpx.get(f"{url}/v1/retrieve/not-a-hash", headers=auth)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(f"{url}/v1/retrieve/{'0' * 24}", params={"start_line": "x"}, headers=auth)
    assert r.status_code == 400


def test_a_dropped_span_is_retrievable_as_a_transcript(start_proxy, upstream):
    url = start_proxy(context_window=2048)
    messages = conversation(12)
    r = post(url, {"model": "fake-model", "messages": messages})
    assert "trim" in r.headers["x-shrink-actions"]
    marker = upstream.last.json()["messages"][1]["content"]
    (ref,) = refs_in(marker.splitlines()[0])
    text = httpx.get(f"{url}/v1/retrieve/{ref}", params={"max_bytes": 10_000_000}).json()["text"]
    assert text.startswith("user: step 0: install things\n-> run(")
    assert messages[3]["content"] in text  # the tool result as sent, not as compacted


def test_the_tool_goes_only_with_tools_and_refs_and_numbers_stay_honest(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256)
    small = {"model": "fake-model", "messages": conversation(1, "ok"), "tools": TOOLS}
    r = post(url, small)
    assert upstream.last.json()["tools"] == TOOLS and r.headers["x-shrink-actions"] == "none"
    assert r.headers["x-shrink-tokens-before"] == r.headers["x-shrink-tokens-after"]
    big = {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": TOOLS}
    r = post(url, big)
    sent = upstream.last.json()
    assert sent["tools"] == [*TOOLS, CHAT_TOOL]
    before, after = (
        int(r.headers["x-shrink-tokens-before"]),
        int(r.headers["x-shrink-tokens-after"]),
    )
    assert after < before
    # Turned off per request: same messages (the plan does not move), no tool.
    r_off = post(url, big, **{"x-shrink-retrieve": "off"})
    off = upstream.last.json()
    assert off["messages"] == sent["messages"] and off["tools"] == TOOLS
    assert int(r_off.headers["x-shrink-tokens-after"]) < after
    assert r_off.headers["x-shrink-tokens-before"] == r.headers["x-shrink-tokens-before"]
    assert NAME not in str(off["tools"])


def test_retrieval_off_in_the_settings_leaves_markers_as_before(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256, retrieve=False)
    post(url, {"model": "fake-model", "messages": conversation(1, BIG_LOG), "tools": TOOLS})
    sent = upstream.last.json()
    assert "hash=" not in sent["messages"][3]["content"] and sent["tools"] == TOOLS


def test_the_store_s_hits_misses_and_entries_are_in_metrics(start_proxy, upstream):
    url = start_proxy(tool_max_tokens=256)
    post(url, {"model": "fake-model", "messages": conversation(1, BIG_LOG)})
    (ref,) = refs_in(upstream.last.json()["messages"][3]["content"])
    assert httpx.get(f"{url}/v1/retrieve/{ref}").status_code == 200
    assert httpx.get(f"{url}/v1/retrieve/{'0' * 24}").status_code == 404
    text = httpx.get(f"{url}/metrics").text
    assert metric(text, "shrink_cache_hits_total", cache="retrieval") == 1
    assert metric(text, "shrink_cache_misses_total", cache="retrieval") == 1
    assert metric(text, "shrink_cache_entries", cache="retrieval") == 1
    # The store's size, as it counts it against SHRINK_STORE_MB, and nothing let go of yet.
    held = metric(text, "shrink_retrieval_store_bytes")
    assert len(BIG_LOG) < held < len(BIG_LOG) + 1000
    assert metric(text, "shrink_retrieval_store_evicted_total") == 0
