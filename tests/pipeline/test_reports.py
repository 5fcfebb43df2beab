"""Test runners' failure reports are logs: their exceptions and locations rank, the code they
quote does not (proxy.pipeline.compact.reports).

The reports in data/ are real runs (data/make_reports.py): pytest `-v` and `-q` with `--tb=long
--showlocals` (1,040 passing tests, 8 failures, two of them through requests and urllib3, 60k
and 37k tokens), `--tb=short`, `--tb=native` and unittest.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from proxy.pipeline.compact import compact_text
from proxy.pipeline.compact.lines import read
from proxy.pipeline.compact.outline import is_source
from proxy.pipeline.compact.reports import frames
from proxy.pipeline.compact.scoring import score_lines, signal_lines
from proxy.pipeline.idioms.record import NORMAL, STRONG
from tests.pipeline.counters import tik

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
LONG = ("pytest-v-long-showlocals", "pytest-q-long-showlocals")
OTHERS = ("pytest-v-short", "pytest-q-native", "unittest-v")
_LOCATION = re.compile(r"^\S+:\d+: ")


def report(name: str) -> str:
    return gzip.decompress((DATA / f"{name}.txt.gz").read_bytes()).decode()


def exceptions(lines: list[str]) -> list[str]:
    """pytest's exception lines: the first `E` line of each block."""
    return [
        line for i, line in enumerate(lines) if line.startswith("E ") and lines[i - 1][:1] != "E"
    ]


def kept(text: str, budget: int) -> tuple[str, set[str]]:
    out = compact_text(text, budget, tik)
    assert out is not None and out.tokens_after <= budget
    return out.kind, set(out.text.split("\n"))


@pytest.mark.parametrize("name", LONG)
def test_a_long_report_is_a_log_not_source(name: str) -> None:
    text = report(name)
    lines = text.split("\n")
    assert not is_source(text, lines, signal_lines)
    reading = read(text)
    assert not reading.plain and not reading.defs
    kind, out = kept(text, 1024)
    assert kind == "log"
    assert not any("definitions" in line for line in out)


@pytest.mark.parametrize("name", LONG)
def test_a_long_report_keeps_its_exceptions_and_failures_first(name: str) -> None:
    text = report(name)
    lines = text.split("\n")
    errors = exceptions(lines)
    assert len(errors) == 14
    failed = [line for line in lines if line.startswith("FAILED ")]
    kind, out = kept(text, 2048)
    assert kind == "log"
    assert all(line in out for line in failed)
    assert [e for e in errors if e not in out] == []
    # At 1,024 tokens most of them already (13 of 14 hold 60-80 characters or more each).
    _, out = kept(text, 1024)
    assert sum(e in out for e in errors) >= 11
    assert all(line in out for line in failed)


@pytest.mark.parametrize("name", LONG)
def test_within_reach_every_e_line_and_raising_location_is_kept(name: str) -> None:
    text = report(name)
    lines = text.split("\n")
    every_e = [line for line in lines if line.startswith("E ") and line[1:].strip()]
    raising = [line for line in lines if _LOCATION.match(line) and line.rstrip()[-1] != ":"]
    assert len(raising) == 14
    _, out = kept(text, 4096)
    assert [e for e in every_e if e not in out] == []
    assert [r for r in raising if r not in out] == []


def test_the_quoted_code_and_locals_rank_below_the_reports_own_lines() -> None:
    text = report("pytest-v-long-showlocals")
    lines = text.split("\n")
    scores = score_lines(lines)
    found = frames(text, lines)
    assert len(found.exceptions) == 14 and len(found.locations) == 49
    # urllib3's own source and locals: "error", "timeout", "total" on them are no signal.
    for quoted in (
        "        error: Exception | None = None,",
        "total      = Decimal('100.00')",
        "self       = <HTTPConnection(host='127.0.0.1', port=9) at",
    ):
        hits = [i for i, line in enumerate(lines) if line.startswith(quoted)]
        assert hits and all(scores[i] <= NORMAL for i in hits), quoted
    assert all(scores[i] == STRONG for i in found.exceptions)
    own = [
        i for i, line in enumerate(lines) if line.startswith(("E ", ">")) or _LOCATION.match(line)
    ]
    assert min(scores[i] for i in own if lines[i][1:].strip()) > NORMAL


@pytest.mark.parametrize("name", OTHERS)
def test_other_reports_stay_logs_and_keep_their_exceptions(name: str) -> None:
    text = report(name)
    reading = read(text)
    assert not reading.plain
    _, out = kept(text, 2048)
    joined = "\n".join(out)
    for exception in (
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9",
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=9)",
    ):
        assert exception in joined, exception


@pytest.mark.parametrize(
    "path", ["proxy/pipeline/trim.py", "proxy/pipeline/compact/lines.py", "bench/corpus.py"]
)
def test_source_files_still_get_their_outline(path: str) -> None:
    text = (ROOT / path).read_text()
    lines = text.split("\n")
    assert not frames(text, lines)
    assert is_source(text, lines, signal_lines)
    out = compact_text(text, 409, tik)
    assert out is not None and out.kind == "text" and "definitions" in out.text


def test_a_frame_is_its_layout_around_a_location() -> None:
    lines = [
        "tests/test_a.py::test_b PASSED",
        "___________________ test_c ___________________",
        "",
        "    def test_c():",
        "        error = None",
        ">       assert load() == 3",
        "E       assert 2 == 3",
        "E        +  where 2 = load()",
        "",
        "error      = None",
        "",
        "tests/test_a.py:12: AssertionError",
        "----------------------------- Captured log call ------------------------------",
        "ERROR    ledger.sync:sync.py:15 push failed: connection refused",
        "12:30:01: the clock is no location",
        "see docs.txt:12: for details",
    ]
    text = "\n".join(lines)
    found = frames(text, lines)
    assert found.exceptions == {6} and found.details == {7} and found.raises == {5, 11}
    assert found.locations == {11} and found.quoted == {2, 3, 4, 8, 9, 10}
    scores = score_lines(lines)
    assert scores[4] <= NORMAL and scores[9] <= NORMAL  # "error" in the program's text
    assert scores[13] >= STRONG  # the captured log's own error still ranks
    # A short frame opens at its location and quotes one line.
    short = ["tests/test_a.py:12: in test_c", "    assert load() == 3", "E   assert 2 == 3"]
    found = frames("\n".join(short), short)
    assert found.locations == {0} and found.exceptions == {2} and found.quoted == {1}
    # No `E` or `>` line before it: a line that reads like a location frames nothing.
    plain = ["    total errors: 3", "notes.txt:4: "]
    assert not frames("\n".join(plain), plain)
