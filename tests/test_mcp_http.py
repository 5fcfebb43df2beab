"""The proxy's `/mcp` (Streamable HTTP), driven by the official MCP SDK's client.

The proxy runs under real uvicorn on 127.0.0.1 (tests/conftest.py's start_proxy). `/mcp` sits
behind the inbound key, offers command execution only when told to, and the proxy serves as
ever, `/mcp` answering what to install, when the MCP SDK is not installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from tests.mcp_client import TOOLS, call, conversation, http_session
from tests.shared_dir import ROOT

pytestmark = pytest.mark.timeout(120)

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}


def test_the_context_tools_over_http_behind_the_key_and_no_command_execution(start_proxy):
    url = start_proxy(proxy_api_key="sekret")
    # Without the key, or with a wrong one: the proxy's own 401, before the MCP layer.
    for headers in ({}, {"authorization": "Bearer wrong"}):
        r = httpx.post(url + "/mcp", json=INIT, headers=ACCEPT | headers)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "invalid_api_key"

    async def scenario():
        async with http_session(url, "sekret") as session:
            listed = await session.list_tools()
            assert {t.name for t in listed.tools} == TOOLS - {"run_compact_command"}
            told = (await session.initialize()).instructions
            assert "run_compact_command" not in told and "trim_context" in told
            messages = conversation()
            _, est = await call(session, "estimate_context", messages=messages, context_window=4096)
            assert est["should_trim"] and est["counter"]["exact"]
            _, trimmed = await call(
                session, "trim_context", messages=messages, context_window=4096, keep_last=6
            )
            assert trimmed["report"]["fits"] and trimmed["messages"][-6:] == messages[-6:]
            _, done = await call(
                session,
                "compact_context",
                messages=messages,
                context_window=4096,
                summary="Long turns about words; the test failed.",
            )
            assert done["summary"]["source"] == "caller" and done["summary"]["applied"]
            text, bad = await call(session, "trim_context", messages=[{"content": "no role"}])
            assert bad["status"] == "invalid" and "role" in text
            result = await session.call_tool("run_compact_command", {"command": "id"})
            assert result.is_error  # not offered over HTTP unless enabled

    anyio.run(scenario)


def test_command_execution_over_http_when_enabled(start_proxy, tmp_path: Path):
    (tmp_path / "log.txt").write_text(
        "".join(f"step {i}: ok\n" for i in range(2000)) + "ERROR: disk full\n"
    )
    url = start_proxy(mcp_http_exec=True, mcp_workspace=str(tmp_path))

    async def scenario():
        async with http_session(url) as session:
            listed = await session.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            text, out = await call(session, "run_compact_command", command="cat log.txt")
            assert out["status"] == "ok" and "ERROR: disk full" in out["output"]
            assert out["tokens_after"] < out["tokens_before"]
            _, page = await call(
                session, "read_output", output_ref=out["output_ref"], grep="step 1234:"
            )
            assert page["text"] == "1235: step 1234: ok"
            _, refused = await call(session, "run_compact_command", command="ls", cwd="..")
            assert refused["status"] == "refused"

    anyio.run(scenario)


def test_the_proxy_serves_without_the_mcp_extra(start_proxy, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed: find_spec says None
    url = start_proxy()
    assert httpx.get(url + "/healthz").status_code == 200
    shrunk = httpx.post(url + "/v1/shrink", json={"messages": [{"role": "user", "content": "x"}]})
    assert shrunk.status_code == 200
    r = httpx.post(url + "/mcp", json=INIT, headers=ACCEPT)
    assert r.status_code == 404
    assert "pip install 'shrink-proxy[mcp]'" in r.json()["error"]["message"]


def test_shrink_proxy_mcp_without_the_extra_says_what_to_install(tmp_path: Path):
    code = "import sys; sys.modules['mcp'] = None; from proxy.cli import main; sys.exit(main())"
    r = subprocess.run(
        [sys.executable, "-c", code, "mcp"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert "pip install 'shrink-proxy[mcp]'" in r.stderr


LAZY = """
import sys, httpx
from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.server import serve
client = {"name": "t", "version": "1"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}}
ACCEPT = {"accept": "application/json, text/event-stream"}
settings = Settings(upstream_url="http://127.0.0.1:9/v1", discover_window=False)
with serve(create_app(settings)) as url:
    httpx.get(url + "/healthz")
    print("mcp" in sys.modules)
    r = httpx.post(url + "/mcp", json=INIT, headers=ACCEPT)
    print(r.status_code, "mcp" in sys.modules)
    r = httpx.post(url + "/mcp", json=INIT, headers=ACCEPT)
    print(r.status_code)
"""


def test_the_mcp_sdk_is_loaded_by_the_first_mcp_request_only(tmp_path: Path):
    """The SDK holds ~25 MB of a process's memory (bench.overhead's idle proxy: 118 MB with it
    loaded at startup, 93 MB without): a proxy that never serves /mcp does not load it."""
    r = subprocess.run(
        [sys.executable, "-c", LAZY],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "200", "True", "200"]


def test_read_output_reads_back_the_hashes_in_markers_from_tools_and_proxied_requests(
    start_proxy, upstream
):
    from proxy.pipeline.refs import refs_in
    from tests.test_shrink_http import BIG_LOG
    from tests.test_shrink_http import conversation as chat

    url = start_proxy(tool_max_tokens=256)
    r = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": chat(1, BIG_LOG)})
    (proxied,) = refs_in(upstream.last.json()["messages"][3]["content"])

    async def scenario():
        async with http_session(url, None) as session:
            text, page = await call(session, "read_output", output_ref=proxied, grep="no matching")
            assert page["matches"] == 1 and "No matching distribution" in text
            messages = conversation()
            _, trimmed = await call(
                session, "trim_context", messages=messages, context_window=4096, keep_last=6
            )
            marker = next(m["content"] for m in trimmed["messages"] if "earlier" in m["content"])
            (span,) = refs_in(marker.splitlines()[0])
            text, page = await call(session, "read_output", output_ref=span, end_line=3)
            assert page["end_line"] == 3 and text.count("\n") >= 3
            text, gone = await call(session, "read_output", output_ref="ab" * 12)
            assert gone["status"] == "expired" and "not held" in text

    assert r.status_code == 200
    anyio.run(scenario)
