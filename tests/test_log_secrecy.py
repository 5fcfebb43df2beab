"""No secret ever reaches the proxy's log, at any level, on any path (errors included).

The proxy runs as `python -m proxy serve` (its real logging set-up) with recognisable secrets in
every place a client or operator puts one: the client's `Authorization` and `api-key`, the
configured upstream key, message content, a query string, credentials in the upstream URL.
Traffic covers success, streaming, bad JSON, a bad shape, 413, a request too large for the
window, a bad header value, an upstream 500, a mid-stream drop, an unreachable upstream (502),
and an internal error (a traceback). Every byte the process wrote is searched for the marker.
"""

from __future__ import annotations

import contextlib

import httpx
import orjson
import pytest

from tests.fakes import faulty
from tests.fakes.upstream import FakeUpstream
from tests.proxy_process import ProxyProcess, proxy_process

pytestmark = pytest.mark.slow

MARK = "S3CR3T"  # every secret contains it; the log must not
CLIENT_KEY = f"sk-client-{MARK}-auth"
AZURE_KEY = f"azure-{MARK}-apikey"
UPSTREAM_KEY = f"sk-upstream-{MARK}-configured"
CONTENT = f"my password is {MARK}-hunter2"
QUERY_KEY = f"{MARK}-query"
URL_PASSWORD = f"{MARK}-urlpass"

HEADERS = {"authorization": f"Bearer {CLIENT_KEY}", "api-key": AZURE_KEY}
MESSAGES = [
    {"role": "system", "content": f"system prompt {MARK}"},
    {"role": "user", "content": CONTENT},
]


@pytest.fixture(params=[("info", "json"), ("debug", "json"), ("debug", "text")], ids=str)
def level_format(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


def start(
    upstream_url: str, level_format: tuple[str, str]
) -> contextlib.AbstractContextManager[ProxyProcess]:
    level, fmt = level_format
    return proxy_process(
        upstream_url,
        "--log-level",
        level,
        "--log-format",
        fmt,
        env={"SHRINK_UPSTREAM_API_KEY": UPSTREAM_KEY, "SHRINK_MAX_BODY_BYTES": "1048576"},
    )


def chat(url: str, body: object = None, *, raw: bytes | None = None, **headers: str) -> int:
    content = raw if raw is not None else orjson.dumps(body)
    r = httpx.post(
        url + "/v1/chat/completions",
        content=content,
        headers={**HEADERS, "content-type": "application/json", **headers},
        timeout=30,
    )
    return r.status_code


def assert_clean(proxy: ProxyProcess, min_requests: int) -> None:
    log = proxy.log()
    assert log.count("request") >= min_requests, log[-2000:]  # the traffic was logged at all
    lines = [line for line in log.splitlines() if MARK in line]
    assert lines == [], "\n".join(lines[:5])


def test_no_secret_in_the_log_on_any_path(fake: FakeUpstream, level_format):
    body = {"model": "gpt-4o", "messages": MESSAGES}
    deep = '{"a":' * 1000 + f'"{MARK}"' + "}" * 1000
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with start(fake.url + "/v1", level_format) as proxy:  # type: ignore[attr-defined]
        url = proxy.url
        statuses = [
            chat(url, body),
            chat(url, {**body, "stream": True}),
            chat(url, raw=orjson.dumps(body)[:-20]),  # bad JSON, cut inside the content
            chat(url, {"model": "m", "messages": CONTENT}),  # wrong shape
            chat(url, {"model": "m", "messages": [{"role": "user", "content": MARK * 300_000}]}),
            chat(
                url, {"model": "small", "messages": [{"role": "user", "content": CONTENT * 9000}]}
            ),
            chat(url, body, **{"x-fake-status": "500"}),
            chat(url, {**body, "stream": True}, **{"x-fake-drop-after": "1"}),
            chat(url, body, **{"x-shrink-mode": f"bogus-{MARK}"}),
            chat(
                url,
                {
                    "model": "gpt-4o",
                    "messages": [
                        *MESSAGES,
                        {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "c", "content": deep},
                        {"role": "user", "content": CONTENT},
                    ],
                },
            ),
        ]
        assert statuses[:2] == [200, 200] and 400 in statuses and 413 in statuses
        assert 500 in statuses  # the upstream's 500 (and maybe an internal error)
    assert_clean(proxy, 8)


def test_no_secret_in_the_log_from_a_query_string(fake: FakeUpstream):
    """Some backends take a key as `?key=`; the request log names the path, never the query."""
    with start(fake.url + "/v1", ("info", "json")) as proxy:  # type: ignore[attr-defined]
        assert httpx.get(proxy.url + f"/v1/models?key={QUERY_KEY}").status_code == 200
    assert_clean(proxy, 1)


def test_no_secret_in_the_log_when_the_upstream_is_unreachable(level_format):
    with faulty.refused() as dead, start(dead.url, level_format) as proxy:
        assert chat(proxy.url, {"model": "m", "messages": MESSAGES}) == 502
        assert chat(proxy.url, {"model": "m", "messages": MESSAGES, "stream": True}) == 502
        assert httpx.get(proxy.url + "/readyz").status_code == 503
    assert_clean(proxy, 2)


def test_no_secret_in_the_log_from_credentials_in_the_upstream_url(fake: FakeUpstream):
    """`http://user:password@host/v1` is a legal base URL (basic auth); the password is a secret."""
    host = fake.url.removeprefix("http://")  # type: ignore[attr-defined]
    upstream_url = f"http://user:{URL_PASSWORD}@{host}/v1"
    with start(upstream_url, ("debug", "json")) as proxy:
        assert chat(proxy.url, {"model": "m", "messages": MESSAGES}) == 200
    assert_clean(proxy, 1)
