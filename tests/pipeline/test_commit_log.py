"""`git log` output: a list of commits whose map (subjects, then hash lines) is listed under the
marker, never a log whose `N files changed` lines and message words are ranked as verdicts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from proxy.pipeline.compact import compact_text
from proxy.pipeline.compact.outline import commit_map
from tests.pipeline.counters import tik
from tests.pipeline.test_compact_cases import outline_in

WHAT = "the commits' subjects and hashes among them"


def subject(c: int) -> str:
    return f"Fix the error in parser stage {c} when the input is empty"


def git_log(commits: int = 40, stat: bool = False, patch: bool = False, graph: bool = False) -> str:
    """`git log` in its default (medium) format, newest first, as git prints it."""
    bar = "| " if graph else ""
    out: list[str] = []
    for c in range(commits, 0, -1):
        out.append(f"{'* ' if graph else ''}commit {c:040x}")
        out += [f"{bar}Author: Dev {c % 3} <dev{c % 3}@example.com>"]
        out += [f"{bar}Date:   Tue Dec 1 {c % 24:02d}:00:00 2026 +0000", bar]
        out += [f"{bar}    {subject(c)}", bar]
        out += [f"{bar}    The parser raised an error on empty files; it now returns none.", bar]
        if stat:
            out += [f"{bar} src/parser_{c}.py | {c % 9 + 2} +-", f"{bar} 1 file changed"]
            out += [bar]
        if patch:
            out += [f"diff --git a/src/parser_{c}.py b/src/parser_{c}.py", "index 1a2b3c4..5d6e7f8"]
            out += [f"--- a/src/parser_{c}.py", f"+++ b/src/parser_{c}.py"]
            out += ["@@ -1,3 +1,3 @@ def parse(text):", "-    raise ValueError('empty')"]
            out += ["+    return None", "     return tree", ""]
    return "\n".join(out + ["[exit code: 0]"])


@pytest.mark.parametrize("graph", [False, True])
def test_each_commits_subject_and_hash_line_are_its_map(graph: bool) -> None:
    lines = git_log(5, stat=True, graph=graph).split("\n")
    found = commit_map(lines, "\n".join(lines))
    assert found is not None
    assert {rank for _, rank in found} == {0}
    assert [lines[i].lstrip("*| ") for i, _ in found] == [
        line for c in range(5, 0, -1) for line in (f"commit {c:040x}", subject(c))
    ]


def test_a_patch_logs_map_adds_its_file_and_hunk_headers() -> None:
    lines = git_log(4, patch=True).split("\n")
    found = dict(commit_map(lines, "\n".join(lines)) or [])
    assert sorted(set(found.values())) == [0, 2, 4]
    assert lines[min(i for i, r in found.items() if r == 2)].startswith("diff --git ")


@pytest.mark.parametrize(
    "text",
    [
        git_log(2),  # too few commits to be a list
        # A message that mentions commits, with no header after them.
        "\n".join(f"commit {c:07x} was reverted by the bot" for c in range(40)),
        "\n".join(f"Please commit abcdef{c} after review" for c in range(40)),
    ],
)
def test_other_texts_have_no_commit_map(text: str) -> None:
    assert commit_map(text.split("\n"), text) is None


@pytest.mark.parametrize("kwargs", [{}, {"stat": True}, {"patch": True}, {"graph": True}], ids=str)
def test_a_long_git_log_keeps_its_subjects_not_its_stat_lines(kwargs: dict[str, bool]) -> None:
    text = git_log(60, **kwargs)
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    _, listed, _ = outline_in(out, WHAT)
    # The hash lines and subjects of the commits just below the head's, in order, are most of
    # what is kept.
    assert [line.lstrip("*| ") for line in listed[:8]] == [
        line for c in range(59, 55, -1) for line in (f"commit {c:040x}", subject(c))
    ]
    assert sum(line.endswith("file changed") for line in out) <= 2  # no verdicts of its own
    assert out[0].lstrip("* ") == f"commit {60:040x}" and out[-1] == "[exit code: 0]"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_real_git_log_stat_keeps_its_subjects(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        env = {
            "GIT_AUTHOR_NAME": "Dev",
            "GIT_AUTHOR_EMAIL": "dev@example.com",
            "GIT_COMMITTER_NAME": "Dev",
            "GIT_COMMITTER_EMAIL": "dev@example.com",
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        }
        done = subprocess.run(
            ["git", *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    git("init", "-q")
    for c in range(40):
        (tmp_path / f"module_{c % 7}.py").write_text(f"VALUE = {c}\n" * (c + 1))
        git("add", "-A")
        git("commit", "-q", "-m", f"Tune module {c % 7} to value {c}", "-m", "Body " * 30)
    text = git("log", "--stat")
    r = compact_text(text, 409, tik)
    assert r is not None and r.tokens_after <= 409
    _, listed, _ = outline_in(r.text.split("\n"), WHAT)
    assert [line.strip() for line in listed[1:6:2]] == [
        f"Tune module {c % 7} to value {c}" for c in range(38, 35, -1)
    ]
    assert all(line.startswith("commit ") for line in listed[0:6:2])


def test_a_dropped_git_logs_messages_are_no_error_facts() -> None:
    """A commit message quoting the error it fixed is history, not an error the run hit; the
    same line in a test run's output is one."""
    from proxy.pipeline.facts import extract_facts

    def facts(text: str) -> list[str]:
        return extract_facts([{"role": "tool", "tool_call_id": "c", "content": text}])

    quoted = "ValueError: empty input in parser stage 7"
    log = git_log(40, stat=True).replace(
        "    The parser raised an error on empty files; it now returns none.", "    " + quoted
    )
    assert log.count(quoted) == 40
    assert not any(quoted in f for f in facts(log))
    run = "\n".join(["collected 3 items", "E   " + quoted, "1 failed in 0.12s"])
    assert any(quoted in f for f in facts(run))
