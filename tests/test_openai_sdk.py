"""The real `openai` Python SDK as the client, through the proxy, against the fake upstream."""

from __future__ import annotations

import asyncio

import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def client(proxy_url):
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-dummy", max_retries=0) as c:
        yield c


def test_sync_non_stream(client, upstream):
    out = client.chat.completions.create(model="fake-model", messages=MESSAGES)
    assert out.choices[0].message.content == "Hello from fake upstream."
    assert upstream.last.header("authorization") == "Bearer sk-dummy"


def test_sync_stream(client):
    stream = client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "tok0 tok1 tok2 "


def test_raw_response_headers(client):
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=MESSAGES)
    assert raw.headers["x-request-id"].startswith("shrink-")
    assert raw.parse().choices[0].finish_reason == "stop"


def test_async_stream_and_non_stream(proxy_url):
    async def run():
        async with openai.AsyncOpenAI(
            base_url=proxy_url + "/v1", api_key="sk-dummy", max_retries=0
        ) as c:
            out = await c.chat.completions.create(model="fake-model", messages=MESSAGES)
            stream = await c.chat.completions.create(
                model="fake-model", messages=MESSAGES, stream=True
            )
            parts = [ch.choices[0].delta.content async for ch in stream if ch.choices]
            return out, parts

    out, parts = asyncio.run(run())
    assert out.choices[0].message.content == "Hello from fake upstream."
    assert "".join(p or "" for p in parts) == "tok0 tok1 tok2 "


def test_models_list(client):
    assert [m.id for m in client.models.list()] == ["fake-model"]


def test_upstream_error_reaches_sdk_as_its_status(client):
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="fake-model", messages=MESSAGES, extra_headers={"x-fake-status": "429"}
        )
    assert info.value.body["message"] == "fake upstream error 429"  # type: ignore[index]


def test_proxy_error_is_understood_by_sdk(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="fake-model", messages=[])
    assert info.value.code is None or isinstance(info.value.code, str)
    assert "messages" in str(info.value)


def test_mid_stream_failure_raises_in_sdk(client):
    stream = client.chat.completions.create(
        model="fake-model",
        messages=MESSAGES,
        stream=True,
        extra_headers={"x-fake-chunks": "5", "x-fake-drop-after": "2"},
    )
    got = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            got.append(chunk)
    assert len(got) == 2
    assert "mid-response" in str(info.value)


def test_azure_client(proxy_url, upstream):
    with openai.AzureOpenAI(
        azure_endpoint=proxy_url,
        api_key="azure-key",
        api_version="2024-10-21",
        max_retries=0,
    ) as az:
        out = az.chat.completions.create(model="my-deployment", messages=MESSAGES)
    assert out.choices[0].message.content == "Hello from fake upstream."
    rec = upstream.last
    assert rec.path == "/openai/deployments/my-deployment/chat/completions"
    assert rec.query == b"api-version=2024-10-21"
    assert rec.header("api-key") == "azure-key"
