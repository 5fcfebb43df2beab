"""Streaming usage: asked for upstream when the client did not, and hidden from that client."""

from __future__ import annotations

import logging

import httpx
import openai
import orjson

CHAT = {
    "model": "fake-model",
    "messages": [{"role": "user", "content": "hi there"}],
    "stream": True,
}


def frames(text: str) -> list[str]:
    return [f for f in text.split("\n\n") if f]


def test_usage_is_requested_upstream_and_stripped_for_the_client(proxy_url, upstream, caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    r = httpx.post(proxy_url + "/v1/chat/completions", json=CHAT)
    sent = upstream.last.json()
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == CHAT["messages"]
    got = frames(r.text)
    assert got[-1] == "data: [DONE]"
    assert not any('"usage"' in f for f in got)
    # Same bytes as the upstream sends to a client that never asked for usage.
    direct = httpx.post(upstream.url + "/v1/chat/completions", json=CHAT)
    assert r.content == direct.content
    # The proxy learned the true prompt size.
    lines = [rec for rec in caplog.records if rec.name == "proxy.request"]
    assert lines and lines[-1].fields["upstream_prompt_tokens"] > 0


def test_an_unshrunk_body_keeps_its_own_bytes_with_the_option_spliced_in(proxy_url, upstream):
    """No re-serialisation of what the pipeline left alone: key order, spacing and number
    formats stay the client's; only the option is added in front."""
    raw = (
        b'  {"model": "fake-model", "temperature": 0.50, "stream": true,\n'
        b' "messages": [{"role":"user","content":"hi \\u00e9"}]}'
    )
    r = httpx.post(proxy_url + "/v1/chat/completions", content=raw)
    assert r.status_code == 200
    assert upstream.last.body == b'  {"stream_options":{"include_usage":true},' + raw[3:]
    assert not any('"usage"' in f for f in frames(r.text))


def test_existing_stream_options_are_merged(proxy_url, upstream):
    raw = orjson.dumps({**CHAT, "stream_options": {"include_obfuscation": False}})
    httpx.post(proxy_url + "/v1/chat/completions", content=raw)
    sent = upstream.last.json()
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_client_that_asks_for_usage_gets_it_and_its_bytes_untouched(proxy_url, upstream):
    raw = orjson.dumps({**CHAT, "stream_options": {"include_usage": True}})
    r = httpx.post(proxy_url + "/v1/chat/completions", content=raw)
    assert upstream.last.body == raw
    assert '"usage"' in frames(r.text)[-2]
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0) as c:
        chunks = list(
            c.chat.completions.create(
                model="fake-model",
                messages=CHAT["messages"],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_sdk_without_usage_never_sees_a_choiceless_chunk(proxy_url):
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0) as c:
        chunks = list(
            c.chat.completions.create(model="fake-model", messages=CHAT["messages"], stream=True)
        )
    assert chunks and all(ch.choices for ch in chunks)
    assert all(ch.usage is None for ch in chunks)


def test_other_stream_options_are_kept(proxy_url, upstream):
    httpx.post(proxy_url + "/v1/chat/completions", json={**CHAT, "stream_options": {"x_vendor": 1}})
    assert upstream.last.json()["stream_options"] == {"x_vendor": 1, "include_usage": True}


def test_no_injection_on_azure_paths_or_when_disabled(start_proxy, upstream):
    url = start_proxy()
    raw = orjson.dumps(CHAT)
    httpx.post(url + "/openai/deployments/d/chat/completions?api-version=2024-10-21", content=raw)
    assert upstream.last.body == raw
    off = start_proxy(stream_usage=False)
    r = httpx.post(off + "/v1/chat/completions", content=raw)
    assert upstream.last.body == raw
    assert r.status_code == 200


def test_non_stream_usage_is_read_and_the_answer_relayed_whole(proxy_url, upstream, caplog):
    caplog.set_level(logging.INFO, logger="proxy.request")
    body = {k: v for k, v in CHAT.items() if k != "stream"}
    direct = httpx.post(upstream.url + "/v1/chat/completions", json=body)
    r = httpx.post(proxy_url + "/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.json()["choices"] == direct.json()["choices"]
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.headers["x-upstream-marker"] == "yes"
    rec = [x for x in caplog.records if x.name == "proxy.request"][-1]
    assert rec.fields["upstream_prompt_tokens"] == direct.json()["usage"]["prompt_tokens"]
