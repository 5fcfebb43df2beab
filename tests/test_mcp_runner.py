"""One command run for `run_compact_command`, in-process: confinement, argv, bytes held, the
process group on timeout, and what it printed as the model reads it."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from proxy.mcp import output, runner

PY = sys.executable


def run(argv, cwd=".", seconds=10.0, max_bytes=1 << 20) -> runner.Run:
    return asyncio.run(runner.run(argv, os.path.realpath(cwd), seconds, max_bytes))


def test_cwd_resolves_inside_the_root_only(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "out").symlink_to("/")
    (tmp_path / "a" / "in").symlink_to(tmp_path / "a" / "b")
    root = str(tmp_path / "a")
    assert runner.resolve_cwd(root, None) == os.path.realpath(root)
    assert runner.resolve_cwd(root, "b") == os.path.realpath(tmp_path / "a" / "b")
    assert runner.resolve_cwd(root, "in") == os.path.realpath(tmp_path / "a" / "b")
    assert runner.resolve_cwd(root, "b/..") == os.path.realpath(root)
    for bad in ("..", "b/../..", "out", "/", "/tmp", str(tmp_path)):
        with pytest.raises(runner.Refused, match="outside the workspace root"):
            runner.resolve_cwd(root, bad)
    (tmp_path / "a2").mkdir()  # a sibling sharing the root's name as a prefix
    with pytest.raises(runner.Refused):
        runner.resolve_cwd(root, "../a2")
    with pytest.raises(runner.Refused, match="not a folder"):
        runner.resolve_cwd(root, "missing")


def test_argv_no_shell_unless_configured():
    assert runner.argv_of("grep -rn 'a b' src", shell=False) == ["grep", "-rn", "a b", "src"]
    assert runner.argv_of("ls | wc -l", shell=False) == ["ls", "|", "wc", "-l"]
    assert runner.argv_of("ls | wc -l", shell=True) == ["/bin/sh", "-c", "ls | wc -l"]
    assert runner.argv_of(["echo", "a b"], shell=True) == ["/bin/sh", "-c", "echo 'a b'"]
    for bad in ("", "   ", []):
        with pytest.raises(runner.Refused):
            runner.argv_of(bad, shell=False)


def test_capture_keeps_head_and_tail_and_counts_the_middle():
    cap = runner.Capture(10)
    for chunk in (b"0123", b"4567", b"89ab", b"cdef", b"ghij"):
        cap.add(chunk)
    assert bytes(cap.head) == b"01234" and cap.tail_bytes() == b"fghij" and cap.total == 20


def test_output_beyond_the_cap_is_counted_not_held():
    done = run([PY, "-c", "import sys; sys.stdout.write('a' * 100000 + 'END')"], max_bytes=1000)
    assert done.status == "ok" and done.total_bytes == 100_003
    assert len(done.head) == 500 and done.tail.endswith(b"END") and done.omitted_bytes == 99_003
    text, binary = output.decode(done)
    assert "99,003 bytes of output not kept" in text and not binary


def test_stdin_is_closed_and_stderr_joins_stdout():
    code = "import sys; print(repr(sys.stdin.read())); print('oops', file=sys.stderr)"
    done = run([PY, "-c", code])
    assert done.head == b"''\noops\n" and done.exit_code == 0


def test_the_servers_own_settings_are_not_passed_on(monkeypatch):
    monkeypatch.setenv("SHRINK_UPSTREAM_API_KEY", "sk-secret")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    done = run(["env"])
    assert b"SOMETHING_ELSE=kept" in done.head and b"SHRINK_" not in done.head


def test_exit_codes_and_signals():
    assert run([PY, "-c", "raise SystemExit(3)"]).exit_code == 3
    killed = run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert killed.status == "failed" and killed.exit_code == -9


def test_children_left_running_after_the_command_exits_are_ended():
    code = "import subprocess; p = subprocess.Popen(['sleep', '30']); print(p.pid)"
    done = run([PY, "-c", code], seconds=20)
    assert done.status == "ok" and done.killed_children and done.duration < 5


def test_clean_strips_escapes_and_keeps_the_last_redraw():
    text = "\x1b[32mok\x1b[0m 1\r\n\x1b]0;title\x07[#   ] 10%\r[### ] 70%\r[####] 100%\ndone\n"
    assert output.clean(text) == "ok 1\n[####] 100%\ndone\n"
    assert output.clean("\x1b]" * 10_000) == ""  # unterminated OSCs: bounded, linear


def test_compact_uses_stage_1_and_its_markers():
    import tiktoken

    from tests.shared_dir import use_offline_encodings

    use_offline_encodings()
    enc = tiktoken.get_encoding("cl100k_base")

    def count(s: str) -> int:
        return len(enc.encode(s, disallowed_special=()))

    kept = "".join(f"Downloading pkg-{i}.whl (1.2 MB)\n" for i in range(2000)) + "ERROR: no space\n"
    view = output.compact(kept, 300, count, 5.0)
    assert view.tokens_after <= 300 < view.tokens_before and view.lines == 2001
    assert "ERROR: no space" in view.text and "omitted by shrink-proxy" in view.text
    small = output.compact("hi\n", 300, count, 5.0)
    assert small.text == "hi\n" and small.tokens_before == small.tokens_after
