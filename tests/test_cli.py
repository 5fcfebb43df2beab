"""The command line: version, help, settings precedence (flags > env > env file)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy import __version__
from proxy.cli import build_parser, main, settings_from


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"shrink-proxy {__version__}"
    r = run("serve", "--help")
    assert r.returncode == 0
    for flag in ("--host", "--port", "--upstream", "--context-window", "--env-file"):
        assert flag in r.stdout


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "serve" in capsys.readouterr().out


def test_flags_override_env_and_env_file(tmp_path, monkeypatch):
    env_file = tmp_path / "backend.env"
    env_file.write_text(
        "SHRINK_UPSTREAM_URL=http://file:1/v1\nSHRINK_PORT=9001\nSHRINK_KEEP_LAST=7\n"
    )
    monkeypatch.setenv("SHRINK_PORT", "9002")
    args = build_parser().parse_args(["serve", "--env-file", str(env_file), "--keep-last", "2"])
    s = settings_from(args)
    assert s.upstream_url == "http://file:1/v1"  # from the file
    assert s.port == 9002  # env beats the file
    assert s.keep_last == 2  # the flag beats both


def test_invalid_settings_exit_2(capsys):
    assert main(["serve", "--upstream", "ftp://nope"]) == 2
    assert "upstream_url" in capsys.readouterr().err


def test_missing_env_file_exit_2(capsys):
    assert main(["serve", "--env-file", "/nonexistent/x.env"]) == 2


@pytest.mark.parametrize(("window", "expected"), [(10, 512), (32768, 32768), (10**12, 10_000_000)])
def test_context_window_is_clamped(window, expected):
    args = build_parser().parse_args(["serve", "--context-window", str(window)])
    assert settings_from(args).context_window == expected
