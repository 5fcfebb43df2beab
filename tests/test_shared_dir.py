"""The project is self-contained: the shared folder is found from the project root, and no
machine's absolute path is written into a tracked file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_dir import ROOT, SHARED, TIKTOKEN_CACHE, use_offline_encodings


def test_the_offline_encodings_are_found_beside_the_project() -> None:
    env: dict[str, str] = {}
    found = use_offline_encodings(env)
    if TIKTOKEN_CACHE.is_dir():
        assert found == env["TIKTOKEN_CACHE_DIR"] == str(TIKTOKEN_CACHE)
    else:
        assert found is None and env == {}
    assert use_offline_encodings({"TIKTOKEN_CACHE_DIR": "/elsewhere"}) == "/elsewhere"  # wins


@pytest.mark.skipif(not TIKTOKEN_CACHE.is_dir(), reason="no shared tiktoken files here")
def test_plain_pytest_without_make_or_environment_counts_exactly(tmp_path: Path) -> None:
    """`python -m pytest tests/pipeline/...` with no TIKTOKEN_CACHE_DIR (and an empty temp
    folder, so tiktoken's own default cache cannot help): the test that loads tiktoken's
    encoding directly passes, so it found the files offline."""
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["TMPDIR"] = str(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["tests/pipeline/test_commit_log.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout


def machine_paths() -> list[str]:
    """This machine's absolute paths a file could have copied: the project, the folder beside
    it, and the Python environment running the tests."""
    paths = {str(ROOT), str(SHARED), str(Path(sys.prefix).resolve()), sys.prefix}
    return sorted(p for p in paths if p.count("/") >= 2)


def test_no_tracked_file_holds_a_machine_path() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    found = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: captured logs (gzip), images
        text = data.decode("utf-8", "replace")
        found += [f"{name}: {p}" for p in machine_paths() if p in text]
    assert not found, "absolute machine paths in tracked files:\n" + "\n".join(found)
