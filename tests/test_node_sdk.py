"""The official `openai` Node SDK as a client, through the proxy, against the fake upstream.

tests/node/chat.mjs makes the calls and prints what the SDK saw as JSON; this file starts the
proxy, runs it and checks its output against what the fake upstream recorded. Needs `node` and
`npm ci --prefix tests/node` (the SDK is pinned to 6.x in package-lock.json: 7.x needs Node 22).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.conftest import ROOT

NODE_DIR = ROOT / "tests" / "node"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "openai").is_dir(),
        reason="the Node SDK is not installed: run `npm ci --prefix tests/node`",
    ),
]


def run_node(proxy_url: str, mode: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(NODE), str(NODE_DIR / "chat.mjs"), proxy_url, mode],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, f"node failed:\n{result.stderr}"
    return json.loads(result.stdout)


def test_openai_client_non_stream_and_stream(proxy_url, upstream):
    out = run_node(proxy_url, "openai")
    assert out["nonStream"]["content"] == "Hello from fake upstream."
    assert out["nonStream"]["finishReason"] == "stop"
    assert out["nonStream"]["requestId"].startswith("shrink-")
    assert out["nonStream"]["tokensBefore"].isdigit()
    assert out["stream"] == {"text": "tok0 tok1 tok2 ", "chunks": 4, "finishReason": "stop"}
    first, second = upstream.requests
    for rec in (first, second):
        assert (rec.method, rec.path) == ("POST", "/v1/chat/completions")
        assert rec.header("authorization") == "Bearer sk-node-dummy"
        assert rec.header("user-agent").startswith("OpenAI/JS")
    assert "stream" not in first.json()
    assert second.json()["stream"] is True


def test_azure_client_through_deployments_path(start_proxy, upstream):
    url = start_proxy(upstream_url=upstream.url + "/openai/v1", upstream_api_key="azure-real")
    out = run_node(url, "azure")
    assert out["nonStream"]["content"] == "Hello from fake upstream."
    assert out["stream"]["text"] == "tok0 tok1 tok2 "
    assert len(upstream.requests) == 2
    for rec in upstream.requests:
        assert rec.path == "/openai/deployments/node-deployment/chat/completions"
        assert rec.query.decode() == "api-version=2024-10-21"
        assert rec.header("api-key") == "azure-real"
        assert rec.header("authorization") == "Bearer azure-real"


def test_upstream_error_reaches_the_sdk_as_its_own_error_class(proxy_url, upstream):
    out = run_node(proxy_url, "error")
    assert out["error"] == {
        "class": "RateLimitError",
        "status": 429,
        "code": "fake_error",
        "type": "invalid_request_error",
    }
    assert len(upstream.requests) == 1  # maxRetries 0: the proxy itself retried nothing
