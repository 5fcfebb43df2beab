"""`shrink-proxy mcp` over stdio, driven by the official MCP SDK's ClientSession from outside.

Each test runs a real `python -m proxy mcp` subprocess (its workspace root a temporary folder)
and calls its tools as an agent would: a verbose command compacted then paged back, the context
tools, and the faults a command runner must survive: cwd escapes, a command that outlives its
timeout with children, 500 MB of output, binary output, a missing command, concurrent calls.
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.mcp_client import TOOLS, call, conversation, stdio_session

pytestmark = pytest.mark.timeout(120)

PY = sys.executable

VERBOSE = textwrap.dedent(
    """
    import sys
    print("============================= test session starts ==============================")
    for i in range(3000):
        print(f"tests/test_mod.py::test_case_{i} PASSED                       [{i // 30:3d}%]")
        if i == 1717:
            print("tests/test_mod.py::test_parse_header FAILED")
            print("E       AssertionError: expected 41 == 42")
    print("FAILED tests/test_mod.py::test_parse_header - AssertionError: expected 41 == 42")
    print("======================= 1 failed, 3000 passed in 12.34s ========================")
    sys.exit(1)
    """
)


def run(scenario, workspace: Path, **env: str):
    async def main():
        async with stdio_session(workspace, env) as session:
            return await scenario(session)

    return anyio.run(main)


def test_every_tool_listed_and_a_verbose_command_compacted_then_paged_back(tmp_path: Path):
    (tmp_path / "verbose.py").write_text(VERBOSE)

    async def scenario(session):
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        told = (await session.initialize()).instructions  # when to use which tool
        assert "call run_compact_command instead" in told and "read_output" in told
        assert "estimate_context" in told
        text, out = await call(session, "run_compact_command", command=f"{PY} verbose.py")
        assert text.startswith("[status: failed | exit code: 1 | ")  # status first
        assert out["status"] == "failed" and out["exit_code"] == 1 and out["duration_s"] > 0
        assert out["tokens_before"] > 30_000 and out["tokens_after"] <= 1024
        assert out["counter"] == {"name": "cl100k_base", "exact": True}
        shown = out["output"]
        assert "E       AssertionError: expected 41 == 42" in shown
        assert "1 failed, 3000 passed in 12.34s" in shown
        assert "omitted by shrink-proxy" in shown  # the proxy's own markers
        assert "test_case_1500 PASSED" not in shown
        ref = out["output_ref"]
        # The elided middle, paged back: by line range, then by grep.
        text, page = await call(
            session, "read_output", output_ref=ref, start_line=1502, end_line=1504
        )
        assert page["text"].splitlines()[0].startswith("tests/test_mod.py::test_case_1500 PASSED")
        assert len(page["text"].splitlines()) == 3 and page["total_lines"] == 3005
        assert text.startswith("[lines 1502-1504 of 3005")
        _, found = await call(session, "read_output", output_ref=ref, grep="test_case_1500 ")
        assert found["matches"] == 1 and found["text"].startswith("1502: ")
        _, big = await call(session, "read_output", output_ref=ref)  # ~80-byte lines: 50 KB first
        assert big["truncated_by"] == "bytes" and big["next_start_line"] == big["end_line"] + 1
        assert len(big["text"].encode()) <= 50_000 and big["end_line"] < 2000
        _, gone = await call(session, "read_output", output_ref="out-000000000000")
        assert gone["status"] == "expired" and "Run the command again" in gone["error"]

        messages = conversation()
        _, est = await call(session, "estimate_context", messages=messages, context_window=4096)
        assert est["should_trim"] and not est["fits"] and est["budget"] < 4096
        assert len(est["per_message"]) == len(messages)
        assert est["counter"]["name"] == "cl100k_base"
        _, trimmed = await call(session, "trim_context", messages=messages, context_window=4096)
        assert trimmed["report"]["fits"] and trimmed["changed"]
        kept = trimmed["messages"]
        assert kept[0] == messages[0] and kept[-1] == messages[-1]
        assert kept[-3]["tool_calls"] and kept[-2]["role"] == "tool"  # the pair stays whole
        assert "omitted" in kept[1]["content"]  # the marker
        _, plan = await call(session, "compact_context", messages=messages, context_window=4096)
        assert plan["summary"]["source"] == "none" and plan["report"]["fits"]
        _, done = await call(
            session,
            "compact_context",
            messages=messages,
            context_window=4096,
            summary="The user and the assistant traded long turns about words.",
        )
        assert done["summary"]["source"] == "caller" and done["summary"]["applied"]
        assert "summary of" in done["messages"][1]["content"]
        assert "traded long turns" in done["messages"][1]["content"]
        assert done["report"]["actions"].get("summary") == 1

    run(scenario, tmp_path)


def test_a_real_verbose_command_and_its_elided_lines_read_back(tmp_path: Path):
    async def scenario(session):
        # CPython's import trace: hundreds of lines on stderr, one per module it looks at.
        command = [PY, "-v", "-c", "import json, asyncio"]
        _, out = await call(session, "run_compact_command", command=command, max_tokens=400)
        assert out["status"] == "ok" and out["exit_code"] == 0 and out["lines"] > 300
        assert out["tokens_after"] <= 400 < out["tokens_before"]
        assert "omitted by shrink-proxy" in out["output"]
        _, page = await call(session, "read_output", output_ref=out["output_ref"], start_line=1)
        full = page["text"].splitlines()
        hidden = [line for line in full if line.strip() and line not in out["output"]]
        assert hidden and any("asyncio" in line for line in hidden)
        _, found = await call(
            session, "read_output", output_ref=out["output_ref"], grep="import 'asyncio"
        )
        assert found["matches"] >= 1 and "asyncio" in found["text"]

    run(scenario, tmp_path)


def test_cwd_outside_the_workspace_is_refused_by_dotdot_and_by_symlink(tmp_path: Path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path)

    async def scenario(session):
        _, ok = await call(session, "run_compact_command", command=["pwd"], cwd="sub")
        assert ok["status"] == "ok" and ok["output"].strip() == str((root / "sub").resolve())
        for cwd in ("..", "sub/../..", "escape", "/", str(tmp_path)):
            text, out = await call(session, "run_compact_command", command=["pwd"], cwd=cwd)
            assert out["status"] == "refused", cwd
            assert "outside the workspace root" in text
        _, out = await call(session, "run_compact_command", command="cat ../secret")
        assert out["status"] == "failed"  # arguments are the command's; only cwd is confined

    run(scenario, root)


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path):
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    (tmp_path / "forks.py").write_text(script)

    async def scenario(session):
        began = time.monotonic()
        text, out = await call(
            session, "run_compact_command", command=[PY, "forks.py"], timeout_s=1.5
        )
        assert time.monotonic() - began < 10
        assert out["status"] == "timeout" and out["exit_code"] is None
        assert text.startswith("[status: timeout | no exit code")
        return int(out["output"].split()[1])

    child = run(scenario, tmp_path)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie is dead: it only waits for init to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_500_mb_of_output_keeps_the_server_s_memory_bounded(tmp_path: Path):
    script = (
        "import sys\n"
        "line = b'y' * 1023 + b'\\n'\n"
        "block = line * 64\n"
        "for _ in range(8000): sys.stdout.buffer.write(block)\n"  # 8000 x 64 KiB = 500 MiB
        "print('the last line', flush=True)\n"
    )
    (tmp_path / "flood.py").write_text(script)

    async def scenario(session):
        _, me = await call(
            session, "run_compact_command", command=[PY, "-c", "import os; print(os.getppid())"]
        )
        server = psutil.Process(int(me["output"]))
        before = server.memory_info().rss
        _, out = await call(session, "run_compact_command", command=[PY, "flood.py"], timeout_s=90)
        peak = _peak_rss(server.pid)
        assert out["status"] == "ok" and out["bytes"] == 500 * 2**20 + 14
        assert out["omitted_bytes"] == out["bytes"] - 2 * 2**20  # held: SHRINK_MCP_OUTPUT_MAX_BYTES
        assert "the last line" in out["output"] and "bytes of output not kept" in out["output"]
        assert peak - before < 150 * 2**20, (before, peak)

    run(scenario, tmp_path, SHRINK_MCP_OUTPUT_MAX_BYTES=str(2 * 2**20))


def _peak_rss(pid: int) -> int:
    """The process's high-water mark of resident memory (Linux: VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_binary_output_and_a_missing_command(tmp_path: Path):
    blob = bytes(range(256)) * 64 + b"\xff\xfe not utf-8 \xc3\x28\n"
    (tmp_path / "blob.bin").write_bytes(blob)

    async def scenario(session):
        text, out = await call(session, "run_compact_command", command="cat blob.bin")
        assert out["status"] == "ok" and out["binary"] and out["bytes"] == len(blob)
        assert "\ufffd" in out["output"] and "binary" in text
        text, out = await call(session, "run_compact_command", command="no-such-command-xyz -v")
        assert out["status"] == "error" and out["exit_code"] is None
        assert "command not found: no-such-command-xyz" in text
        _, out = await call(session, "run_compact_command", command="echo 'unbalanced")
        assert out["status"] == "refused" and "cannot split" in out["error"]

    run(scenario, tmp_path)


def test_concurrent_calls_run_at_once(tmp_path: Path):
    sleeper = [PY, "-c", "import time, sys; time.sleep(1.5); print('slept', sys.argv[1])"]

    async def scenario(session):
        results: dict[int, dict] = {}

        async def one(i: int) -> None:
            results[i] = (await call(session, "run_compact_command", command=[*sleeper, str(i)]))[1]

        began = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
        elapsed = time.monotonic() - began
        assert all(results[i]["output"].strip() == f"slept {i}" for i in range(4))
        assert elapsed < 4 * 1.5, elapsed  # not one after the other

    run(scenario, tmp_path)


def test_logs_go_to_stderr_and_stdout_stays_the_protocol(tmp_path: Path):
    log = tmp_path / "stderr.log"

    async def main(errlog):
        env = {"SHRINK_LOG_FORMAT": "text"}
        async with stdio_session(tmp_path, env, errlog, ("--log-level", "info")) as session:
            # A command's own output goes to the tool's result, never to the wire.
            _, out = await call(session, "run_compact_command", command="echo hello")
            return out

    with open(log, "w") as errlog:
        out = anyio.run(main, errlog)
    assert out["output"] == "hello\n"
    assert "shrink-proxy MCP server on stdio; commands run in" in log.read_text()
