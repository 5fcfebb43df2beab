"""Compaction of single tool results: table-driven cases for each content kind and marker."""

from __future__ import annotations

import json
import re

import pytest

from proxy.pipeline.compact import Compacted, compact_text, markers, outline
from proxy.pipeline.compact.scoring import score_lines, shape
from proxy.pipeline.idioms.record import NORMAL, STRONG
from tests.pipeline.counters import crude, tik
from tests.pipeline.test_outline import PROGRAMS, program, readme

COUNTERS = [pytest.param(tik, id="tiktoken"), pytest.param(crude, id="bytes")]
MARKER_LINE = re.compile(
    r"^\[\.\.\. [\d,]+ (?:more similar )?lines? \([\d,]+ tokens?\) "
    r"omitted by shrink-proxy \.\.\.\]$"
)


def pytest_log(passed: int = 600) -> str:
    lines = ["============ test session starts ============", "collected 640 items", ""]
    lines += [
        f"tests/test_mod.py::test_case_{i} PASSED{' ' * 20}[{i * 100 // 640:3d}%]"
        for i in range(passed)
    ]
    lines += [
        "tests/test_mod.py::test_broken FAILED                    [ 99%]",
        "=================== FAILURES ===================",
        "________________ test_broken ________________",
        "    def test_broken():",
        ">       assert compute() == 3",
        "E       assert 2 == 3",
        "tests/test_mod.py:12: AssertionError",
        "=========== short test summary info ===========",
        "FAILED tests/test_mod.py::test_broken - assert 2 == 3",
        "============ 1 failed, 600 passed in 12.31s ============",
        "[exit code: 1]",
    ]
    return "\n".join(lines)


def pip_log() -> str:
    lines = ["Collecting requests==2.32.3"]
    for i in range(200):
        bar = "\r".join(f"   {'━' * (k + 1)} {k * 10}/{90} kB {k}.{i} MB/s" for k in range(10))
        lines += [f"  Downloading pkg{i}-1.{i}.0-py3-none-any.whl ({i + 3} kB)", bar]
    lines += [
        "Installing collected packages: pkg0, pkg1",
        "Successfully installed pkg0-1.0 pkg1-1.1",
        "[exit code: 0]",
    ]
    return "\n".join(lines)


def traceback_log() -> str:
    lines = [f"INFO starting worker {i} on port {8000 + i}" for i in range(300)]
    lines += [
        "Traceback (most recent call last):",
        '  File "/app/main.py", line 10, in <module>',
        "    main()",
        '  File "/app/main.py", line 7, in main',
        "    connect('localhost:8765/health.json')",
        "requests.exceptions.InvalidSchema: No connection adapters were found",
    ]
    lines += [f"DEBUG shutting down handler {i} cleanly after request" for i in range(200)]
    lines += ["[exit code: 1]"]
    return "\n".join(lines)


def gcc_log() -> str:
    lines = [f"cc -c -o obj{i}.o src{i}.c -Wall -O2 -g -fPIC -Iinclude" for i in range(150)]
    lines += [
        "In file included from main.c:3:",
        "ringbuf.c:14:9: error: 'struct ring' has no member named 'capcity'",
        "   14 |     r->capcity = n;",
        "      |        ^~~~~~~",
    ]
    lines += [f"cc -c -o late{i}.o late{i}.c -Wall -O2 -g -fPIC -Iinclude" for i in range(150)]
    lines += ["make: *** [Makefile:8: ringbuf.o] Error 1", "[exit code: 2]"]
    return "\n".join(lines)


@pytest.mark.parametrize("count", COUNTERS)
@pytest.mark.parametrize(
    ("make", "budget", "kind", "must_keep"),
    [
        (
            pytest_log,
            512,
            "log",
            [
                "1 failed, 600 passed in 12.31s",
                "[exit code: 1]",
                "FAILED tests/test_mod.py::test_broken - assert 2 == 3",
                "collected 640 items",
            ],
        ),
        (
            pip_log,
            400,
            "log",
            [
                "Successfully installed pkg0-1.0 pkg1-1.1",
                "[exit code: 0]",
                "Collecting requests==2.32.3",
            ],
        ),
        (
            traceback_log,
            300,
            "log",
            ["requests.exceptions.InvalidSchema: No connection adapters", "[exit code: 1]"],
        ),
        (
            gcc_log,
            300,
            "log",
            [
                "ringbuf.c:14:9: error: 'struct ring' has no member named 'capcity'",
                "make: *** [Makefile:8: ringbuf.o] Error 1",
            ],
        ),
    ],
)
def test_logs_keep_what_matters(make, budget, kind, must_keep, count) -> None:
    text = make()
    r = compact_text(text, budget, count)
    assert isinstance(r, Compacted)
    assert r.kind == kind
    assert count(r.text) == r.tokens_after <= budget
    assert r.tokens_before == count(text)
    assert r.omitted_lines > 0
    for needle in must_keep:
        assert needle in r.text
    assert "shrink-proxy" in r.text


def test_under_budget_is_none() -> None:
    assert compact_text("short output\n[exit code: 0]", 64, tik) is None
    assert compact_text("", 64, crude) is None


def test_progress_bars_keep_last_redraw() -> None:
    r = compact_text(pip_log(), 400, tik)
    assert r is not None
    assert "\r" not in r.text
    assert " 0/90 kB" not in r.text and "80/90 kB" not in r.text  # earlier redraws are gone


def test_exact_repeats_collapse() -> None:
    text = "\n".join(
        ["start"] + ["WARNING: retrying connection"] * 300 + ["done", "[exit code: 0]"]
    )
    r = compact_text(text, 100, tik)
    assert r is not None
    assert markers.repeated(299) in r.text
    assert r.text.count("WARNING: retrying connection") == 1


def test_similar_runs_collapse_with_their_marker() -> None:
    text = "\n".join(
        ["header"]
        + [
            f"npm http fetch GET 200 https://registry.npmjs.org/pkg-{i} {i * 7}ms (cache miss)"
            for i in range(400)
        ]
        + ["added 400 packages in 3s", "[exit code: 0]"]
    )
    r = compact_text(text, 200, tik)
    assert r is not None
    assert "more similar lines" in r.text
    assert "added 400 packages in 3s" in r.text


def failed_list_log() -> str:
    """A verbose run whose summary lists one distinct failure, then 60 of one shape."""
    names = [
        f"test{a}{b}"
        for a in ("Attrs", "Fields", "Slots", "Frozen", "KwOnly", "Define")
        for b in (
            "Inheritance",
            "Generic",
            "ForwardReference",
            "Alias",
            "Converter",
            "Eq",
            "Ord",
            "Hash",
            "Repr",
            "Validator",
        )
    ]
    lines = ["============ test session starts ============", "collected 450 items", ""]
    lines += [
        f"tests/test_mod.py::test_case_{i} PASSED{' ' * 20}[{i // 5:3d}%]" for i in range(400)
    ]
    lines += [
        "=========== short test summary info ===========",
        "FAILED tests/test_conv.py::TestPipe::test_wrapped - AssertionError: assert bool is None",
    ]
    lines += [f"FAILED tests/test_types.yml::{name} - " for name in names]
    lines += ["============ 61 failed, 339 passed in 12.31s ============", "[exit code: 1]"]
    return "\n".join(lines)


@pytest.mark.parametrize("count", COUNTERS)
@pytest.mark.parametrize("budget", [250, 409, 800])
def test_same_shape_errors_keep_first_and_last_with_a_count(count, budget) -> None:
    text = failed_list_log()
    r = compact_text(text, budget, count)
    assert r is not None and r.tokens_after <= budget
    first_distinct = "FAILED tests/test_conv.py::TestPipe::test_wrapped - AssertionError"
    first_of_shape = "FAILED tests/test_types.yml::testAttrsInheritance - "
    last_of_shape = "FAILED tests/test_types.yml::testDefineValidator - "
    for line in (first_distinct, first_of_shape, last_of_shape, "61 failed, 339 passed in 12.31s"):
        assert line in r.text
    # The repeats between them are collapsed behind a marker that counts them.
    between = r.text[r.text.index(first_of_shape) : r.text.index(last_of_shape)]
    assert re.search(r"\[\.\.\. [\d,]+ lines? \([\d,]+ tokens?\) omitted by shrink-proxy", between)
    assert r.text.count("FAILED tests/test_types.yml::") < 60


def test_shape_keeps_the_first_word_and_the_layout() -> None:
    assert shape("FAILED tests/a.py::test_b - ") == shape("FAILED tests/cc.py::test_dd - ")
    assert shape("FAILED tests/a.py::test_b - ") != shape("ERROR tests/a.py::test_b - ")
    assert shape("FAILED tests/a.py::test_b - ") != shape(
        "FAILED tests/a.py::T::test_b - AssertionError: assert x"
    )
    assert shape("ValueError: bad value") != shape("TypeError: bad value")
    assert shape("====") == "===="


def test_distinct_errors_all_stay_before_repeats() -> None:
    """Each distinct error outranks the copies of a repeated one: all of them are kept."""
    lines = [f"noise line {i} of ordinary output from the build" for i in range(200)]
    lines += [f"error: cannot open file 'gen/part{i}.h'" for i in range(30)]
    lines += ["src/main.c:3:1: error: unknown type name 'sizet'"]
    lines += [f"more noise {i} of ordinary output from the linker step" for i in range(200)]
    lines += ["make: *** [Makefile:8: main.o] Error 1", "[exit code: 2]"]
    r = compact_text("\n".join(lines), 300, tik)
    assert r is not None
    for needle in (
        "error: cannot open file 'gen/part0.h'",
        "error: cannot open file 'gen/part29.h'",
        "src/main.c:3:1: error: unknown type name 'sizet'",
        "make: *** [Makefile:8: main.o] Error 1",
    ):
        assert needle in r.text


def test_gap_markers_are_whole_lines_in_the_house_style() -> None:
    r = compact_text(traceback_log(), 300, tik)
    assert r is not None
    gaps = [line for line in r.text.split("\n") if "omitted by shrink-proxy" in line]
    assert gaps and all(MARKER_LINE.match(line) for line in gaps)
    kept = [line for line in r.text.split("\n") if line not in gaps]
    original = traceback_log().split("\n")
    positions = [original.index(line) for line in kept]
    assert positions == sorted(positions)  # original order
    assert len(kept) + r.omitted_lines == len(original)


def test_long_single_line_is_cut_in_the_middle() -> None:
    text = "data: " + ",".join(f"{i:05d}" for i in range(5000)) + " END"
    r = compact_text(text, 200, tik)
    assert r is not None
    assert r.text.startswith("data: 00000,")
    assert r.text.endswith("04999 END")
    assert re.search(
        r"\[\.\.\. [\d,]+ chars \([\d,]+ tokens\) omitted by shrink-proxy \.\.\.\]", r.text
    )
    assert tik(r.text) <= 200


def test_long_line_among_log_lines_cannot_eat_the_budget() -> None:
    lines = [f"step {i} ok" for i in range(50)] + ["x" * 20000] + ["ERROR: boom", "[exit code: 1]"]
    r = compact_text("\n".join(lines), 300, tik)
    assert r is not None
    assert "ERROR: boom" in r.text and "[exit code: 1]" in r.text


def outline_in(out: list[str], what: str) -> tuple[int, list[str], int]:
    """Where the outline marker holding `what` starts in a compacted text's lines, the lines it
    lists, and where its end marker is."""
    head = next(i for i, line in enumerate(out) if what in line)
    end = out.index(markers.outline_end())
    return head, out[head + 1 : end], end


def test_numbered_file_dump_is_head_and_tail_with_one_marker() -> None:
    text = "\n".join(f"{i:6d}\tvalue_{i} = compute(error_rate={i})" for i in range(1, 800))
    r = compact_text(text, 300, tik)
    assert r is not None
    assert r.kind == "text"
    assert r.text.count("omitted by shrink-proxy") == 1
    assert r.text.startswith("     1\t") and r.text.endswith("compute(error_rate=799)")


def module(functions: int = 40) -> list[str]:
    """A Python module: a docstring, imports, a constant, then functions with bodies."""
    lines = ['"""Ledger arithmetic."""', "", "import math", "", "RATE = 0.25", ""]
    for f in range(functions):
        lines += [f"def settle_{f}(entries, rate=RATE):", f'    """Settle batch {f}."""']
        lines += [f"    total_{k} = sum(e.amount * {k} for e in entries)" for k in range(8)]
        lines += ["    return math.floor(total_0 * rate)", ""]
    return lines


def test_numbered_source_dump_lists_the_definitions_it_hides() -> None:
    lines = module()
    text = "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, 1))
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    head, listed, end = outline_in(out, "the definitions among them")
    assert len(listed) >= 5 and all("\tdef settle_" in line for line in listed)
    assert all(line in text.split("\n") for line in listed)  # verbatim, with their numbers
    assert out[0] == '     1\t"""Ledger arithmetic."""'
    assert out[-1] == text.split("\n")[-1]  # the tail is kept as before


@pytest.mark.parametrize("language", PROGRAMS)
def test_unnumbered_source_is_code_not_a_log(language: str) -> None:
    """Read without line numbers, a source file full of `raise ValueError('invalid ...')` is
    still head, tail and the definitions between them, not scattered "error" lines."""
    text = program(language, functions=60)
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    head, listed, end = outline_in(out, "the definitions among them")
    assert len(listed) >= 5 and all("check" in line for line in listed)
    kept = out[:head] + out[end + 1 :]
    assert text.startswith("\n".join(out[:head]))  # one gap: a head ...
    assert text.endswith("\n".join(kept[head:]))  # ... and a tail
    assert "omitted by shrink-proxy" not in "\n".join(kept)


def test_a_document_is_head_tail_and_its_headings() -> None:
    """A README whose prose talks of errors and failures is not a log: its marker lists the
    section headings it hides; the fenced examples' shell comments are no headings."""
    text = readme(sections=40)
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    head, listed, end = outline_in(out, "the headings among them")
    assert len(listed) >= 5 and all(line.startswith("## Section ") for line in listed)
    kept = out[:head] + out[end + 1 :]
    assert text.startswith("\n".join(out[:head])) and text.endswith("\n".join(kept[head:]))


def pods(failing: dict[int, str], n: int = 400) -> str:
    rows = ["NAME                         READY   STATUS             RESTARTS      AGE"]
    for i in range(n):
        state = failing.get(i, "Running")
        ready = "1/1" if state == "Running" else "0/1"
        rows.append(f"web-{i:08x}-{i * 7 % 99991:05d}   {ready}     {state:<18} 0             {i}d")
    return "\n".join(rows)


def containers(exited: dict[int, int], n: int = 300) -> str:
    rows = ["CONTAINER ID   IMAGE        STATUS                     NAMES"]
    for i in range(n):
        state = f"Exited ({exited[i]}) 2 hours ago" if i in exited else "Up 3 days"
        rows.append(f"{i * 7919:012x}   app:1.{i}    {state:<26} app_{i}")
    return "\n".join(rows)


@pytest.mark.parametrize(
    ("text", "failed"),
    [
        (
            pods({173: "CrashLoopBackOff", 251: "ImagePullBackOff", 302: "Evicted"}),
            ["CrashLoopBackOff", "ImagePullBackOff", "Evicted"],
        ),
        (pods({90: "OOMKilled", 200: "ErrImagePull"}), ["OOMKilled", "ErrImagePull"]),
        (containers({120: 137, 199: 1}), ["Exited (137)", "Exited (1)"]),
    ],
)
def test_a_status_tables_failed_rows_are_kept(text: str, failed: list[str]) -> None:
    """One crash-looping pod among hundreds running is what `kubectl get pods` was run for."""
    r = compact_text(text, 409, tik)
    assert r is not None and r.tokens_after <= 409
    for state in failed:
        row = next(line for line in text.split("\n") if state in line)
        assert row in r.text.split("\n")


def test_a_container_that_exited_cleanly_is_no_failure() -> None:
    rows = containers({5: 0, 6: 137}, n=10).split("\n")
    scores = score_lines(rows)
    assert scores[6] == NORMAL and scores[7] > NORMAL  # the header is row 0


def diff(files: int = 30, hunks: int = 3) -> str:
    out = []
    for f in range(files):
        out += [f"diff --git a/src/mod_{f}.py b/src/mod_{f}.py", "index 1a2b3c4..5d6e7f8 100644"]
        out += [f"--- a/src/mod_{f}.py", f"+++ b/src/mod_{f}.py"]
        for h in range(hunks):
            out.append(f"@@ -{10 * h + 1},6 +{10 * h + 1},7 @@ def handler_{h}(request):")
            out += ["     value = load(request)", "-    if value is None:", "+    if not value:"]
            out += [
                "+        log.error('missing value')",
                "         return None",
                "     return value",
            ]
    return "\n".join(out)


def test_a_diff_is_code_and_its_marker_lists_the_files_it_hides() -> None:
    text = diff()
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    head, listed, _ = outline_in(out, "the file and hunk headers among them")
    assert len(listed) >= 5 and all(line.startswith("diff --git a/src/mod_") for line in listed)
    # Not read as a log: the added `log.error(...)` lines are code, not errors to keep.
    assert out[0] == "diff --git a/src/mod_0.py b/src/mod_0.py"
    assert out[-1] == text.split("\n")[-1]


def test_one_files_diff_lists_its_hunks() -> None:
    r = compact_text(diff(files=1, hunks=60), 409, tik)
    assert r is not None
    out = r.text.split("\n")
    head, listed, _ = outline_in(out, "the file and hunk headers among them")
    assert len(listed) >= 5 and all(line.startswith("@@ -") for line in listed)


def test_a_diff_followed_by_a_test_run_stays_a_log() -> None:
    r = compact_text(diff(files=5) + "\n" + pytest_log(), 409, tik)
    assert r is not None and r.kind == "log"
    assert "FAILED tests/test_mod.py::test_broken - assert 2 == 3" in r.text


def grep(files: int = 40, per_file: int = 12) -> str:
    return "\n".join(
        f"src/pkg_{f}/handlers.py:{10 * k + 3}:        raise ValueError(f'bad error code {{code}}')"
        for f in range(files)
        for k in range(per_file)
    )


def test_search_results_list_the_first_match_of_each_file_they_hide() -> None:
    text = grep()
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "text" and r.tokens_after <= 409
    out = r.text.split("\n")
    head, listed, _ = outline_in(out, "the first matches in each file")
    files = [line.split(":")[0] for line in listed]
    assert len(listed) >= 4 and len(set(files)) == len(files)  # one line per file
    assert all(line.split(":")[1] == "3" for line in listed)  # each file's first match
    assert out[0] == text.split("\n")[0] and out[-1] == text.split("\n")[-1]


@pytest.mark.parametrize(
    "lines",
    [
        [f"src/app.py:{i}: error: Incompatible types in assignment" for i in range(300)],  # mypy
        [f"src/app.py:{i}:1: F401 `os` imported but unused" for i in range(300)],  # ruff
        [f"2026-11-30 09:12:{i % 60:02d} INFO worker {i} done" for i in range(300)],  # a log
    ],
)
def test_diagnostics_and_dated_logs_are_not_search_results(lines: list[str]) -> None:
    r = compact_text("\n".join(lines), 409, tik)
    assert r is not None and "first matches" not in r.text


def test_an_application_logs_error_outranks_its_warnings() -> None:
    """The ERROR line among hundreds of INFO lines and dozens of distinct WARN lines (which
    hold words like "timed out" and "failed" too) is the one to keep."""
    stamp = "2026-11-30 09:12:57,310"
    lines = [f"{stamp} INFO app: batch {i} ok" for i in range(1500)]
    for k, i in enumerate(range(100, 1500, 35)):
        lines[i] = f"{stamp} WARN app: retry failed, {' '.join(['timed out'] * (k + 1))}"
    lines[777] = f"{stamp} ERROR app: lost the db connection"
    r = compact_text("\n".join(lines), 409, tik)
    assert r is not None and lines[777] in r.text.split("\n")


def test_ci_annotations_log_levels_and_errno_messages_score_as_errors() -> None:
    lines = [
        "2026/11/30 09:12:03 listen tcp :8080: bind: address already in use",  # Go, no level
        "test\tRun pytest\t2026-11-30T09:13:01.12Z ::error file=src/a.py,line=12::Type mismatch",
        "build\tCompile\t2026-11-30T09:13:01.12Z ##[error]Process completed with exit code 2.",
        "09:12:02.311 [main] FATAL c.a.Worker - out of file handles",
        '{"ts":"09:12:02","level":"error","msg":"lost the db"}',
        "LOG_LEVEL=ERROR",  # a setting, and
        "  Runs without error: the level is ERROR",  # prose: words, not levels
    ]
    assert [s >= STRONG for s in score_lines(lines)] == [True] * 5 + [False] * 2


def test_grep_context_lines_are_search_results_and_dashed_names_are_not() -> None:
    context = []
    for f in range(20):
        context += [f"src/m_{f}.py-{k}-    pass" for k in (10, 11)]
        context += [f"src/m_{f}.py:12:    raise ValueError('bad')", f"src/m_{f}.py-13-", "--"]
    assert outline.match_files(context) is not None  # grep -rn -B2 -A1
    rows = [f"web-{i:05d}-x2x9z   1/1   Running   0   3d" for i in range(200)]
    assert outline.match_files(rows) is None  # `kubectl get pods`: `name-12345-...`, no match


def test_a_log_quoting_source_gets_no_outline() -> None:
    text = pytest_log() + "\n" + "\n".join(module(6))
    r = compact_text(text, 409, tik)
    assert r is not None and r.kind == "log" and "definitions" not in r.text


def test_prose_is_text() -> None:
    words = "the sea wind rolled over grey harbour walls while gulls argued about bread".split()
    text = "\n".join(
        " ".join(words[(i * k) % len(words)] for k in range(1, 12)) for i in range(400)
    )
    r = compact_text(text, 200, tik)
    assert r is not None and r.kind == "text"


@pytest.mark.parametrize("count", COUNTERS)
def test_json_array_keeps_ends_and_stays_valid(count) -> None:
    versions = [f"0.{i}.{i % 7}" for i in range(3000)]
    text = json.dumps(versions, indent=2) + "\n[exit code: 0]"
    r = compact_text(text, 400, count)
    assert r is not None and r.kind == "json"
    body, trailer = r.text.rsplit("\n", 1)
    assert trailer == "[exit code: 0]"
    value = json.loads(body)
    assert value[0] == "0.0.0" and value[-1] == versions[-1]
    assert any(
        isinstance(v, str)
        and re.fullmatch(
            r"\.\.\. [\d,]+ more items \([\d,]+ tokens\) omitted by shrink-proxy \.\.\.", v
        )
        for v in value
    )
    assert body.startswith("[\n  ")  # indented like the input
    assert count(r.text) <= 400


def runs(conclusions: dict[int, str], n: int = 300) -> list[dict[str, object]]:
    """A CI run listing: every run passed except those in `conclusions`."""
    return [
        {
            "id": 9000 + i,
            "branch": f"feature/topic-{i}",
            "checks": {"lint": {"conclusion": "success", "error": None}},
            "conclusion": conclusions.get(i, "success"),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("count", COUNTERS)
def test_json_array_keeps_an_item_from_its_middle_that_reports_a_failure(count) -> None:
    doc = runs({137: "failure"})
    doc[211]["checks"]["lint"]["error"] = "lint crashed: exit 2"  # an error member that holds one
    r = compact_text(json.dumps(doc, indent=2), 800, count)
    assert r is not None and r.kind == "json" and count(r.text) <= 800
    value = json.loads(r.text)
    kept = [item for item in value if isinstance(item, dict)]
    assert kept[0]["id"] == 9000 and kept[-1]["id"] == 9299  # the ends, as before
    failed = [item for item in kept if item["id"] in (9137, 9211)]
    assert [item["branch"] for item in failed] == ["feature/topic-137", "feature/topic-211"]
    assert failed[1]["checks"]["lint"]["error"] == "lint crashed: exit 2"
    gaps = [v for v in value if isinstance(v, str)]
    assert all("more items" in g for g in gaps) and len(gaps) == 3  # one marker per gap


def test_json_array_without_failures_keeps_only_its_ends() -> None:
    # "error": null, a passing conclusion: nothing reports a failure, so nothing extra is kept.
    r = compact_text(json.dumps(runs({}), indent=2), 400, tik)
    assert r is not None
    value = json.loads(r.text)
    gaps = [i for i, v in enumerate(value) if isinstance(v, str)]
    assert len(gaps) == 1 and gaps[0] == len(value) - gaps[0] - 1 + (len(value) % 2 == 0)


@pytest.mark.parametrize(
    "message", ["No errors found", "0 failures", "completed without error", "Not failed"]
)
def test_json_item_that_says_it_has_no_failure_is_not_kept_for_it(message: str) -> None:
    doc = runs({})
    doc[150]["conclusion"] = message
    r = compact_text(json.dumps(doc, indent=2), 400, tik)
    assert r is not None
    assert message not in r.text  # only the ends, as for a listing with no failure at all
    doc[150]["conclusion"] = message + "; 2 errors in retry"  # a real one after it still counts
    r = compact_text(json.dumps(doc, indent=2), 800, tik)
    assert r is not None and "2 errors in retry" in r.text


def test_json_failure_deep_inside_an_item_is_shown_with_the_item_s_names() -> None:
    items = [
        {"metadata": {"name": f"web-{i}"}, "status": {"containers": [{"state": {"ok": True}}]}}
        for i in range(200)
    ]
    items[90]["status"]["containers"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    r = compact_text(json.dumps({"items": items}, indent=4), 300, tik)
    assert r is not None and r.kind == "json"
    assert '"name": "web-90"' in r.text and '"reason": "CrashLoopBackOff"' in r.text


def test_json_where_every_item_fails_still_fits() -> None:
    doc = runs({i: "failure" for i in range(300)})
    r = compact_text(json.dumps(doc, indent=2), 300, tik)
    assert r is not None and tik(r.text) <= 300


def test_json_object_keeps_top_level_keys_and_cuts_strings() -> None:
    doc = {
        "python": "3.11.7",
        "count": 173,
        "readme": "long text " * 2000,
        "distributions": [
            {"name": f"pkg{i}", "version": f"1.{i}", "requires": [f"dep{j}" for j in range(8)]}
            for i in range(300)
        ],
    }
    r = compact_text(json.dumps(doc), 500, tik)
    assert r is not None and r.kind == "json"
    value = json.loads(r.text)
    assert list(value)[:4] == ["python", "count", "readme", "distributions"]
    assert value["count"] == 173
    assert "omitted by shrink-proxy" in value["readme"]
    assert value["distributions"][0]["name"] == "pkg0"
    assert value["distributions"][-1]["name"] in ("pkg299",) or isinstance(
        value["distributions"][-1], str
    )
    assert "\n" not in r.text  # compact input stays compact


def test_json_object_with_many_keys_gets_a_marker_key() -> None:
    doc = {f"18.{i}.0": f"2024-12-{i % 28 + 1:02d}T21:36:13Z" for i in range(2000)}
    r = compact_text(json.dumps(doc, indent=2), 300, tik)
    assert r is not None and r.kind == "json"
    value = json.loads(r.text)
    marker_keys = [k for k in value if "more keys" in k]
    assert len(marker_keys) == 1 and value[marker_keys[0]] is None
    assert "18.0.0" in value and "18.1999.0" in value


def test_broken_json_falls_back_to_lines() -> None:
    text = "[\n" + ",\n".join(f'  "item-{i}"' for i in range(2000)) + "\n"  # never closed
    r = compact_text(text, 200, tik)
    assert r is not None and r.kind in ("log", "text")


def test_json_with_long_trailer_is_not_json() -> None:
    text = json.dumps(list(range(3000))) + "\n" + "\n".join(f"note {i}" for i in range(50))
    r = compact_text(text, 200, tik)
    assert r is not None and r.kind != "json"


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (
            markers.lines_omitted(412, 9310),
            "[... 412 lines (9,310 tokens) omitted by shrink-proxy ...]",
        ),
        (markers.lines_omitted(1, 1), "[... 1 line (1 token) omitted by shrink-proxy ...]"),
        (markers.repeated(37), "[... previous line repeated 37 more times ...]"),
        (
            markers.similar_omitted(1200, 15000),
            "[... 1,200 more similar lines (15,000 tokens) omitted by shrink-proxy ...]",
        ),
        (
            markers.items_omitted(180, 4210),
            "... 180 more items (4,210 tokens) omitted by shrink-proxy ...",
        ),
        (
            markers.chars_omitted(4210, 1050),
            "[... 4,210 chars (1,050 tokens) omitted by shrink-proxy ...]",
        ),
        (markers.keys_omitted(2, 30), "... 2 more keys (30 tokens) omitted by shrink-proxy ..."),
        (
            markers.container_omitted("object", 12, 300),
            "... object with 12 keys (300 tokens) omitted by shrink-proxy ...",
        ),
        (
            markers.outline_head(437, 5468),
            "[... 437 lines (5,468 tokens) omitted by shrink-proxy; "
            "the definitions among them: ...]",
        ),
        (markers.outline_end(), "[... end of the lines listed by shrink-proxy ...]"),
    ],
)
def test_marker_wording(marker: str, expected: str) -> None:
    assert marker == expected


@pytest.mark.parametrize("text", ["-" * 5000, " " * 5000, "=" * 4000 + "\n" + "-" * 4000])
def test_long_text_with_few_tokens_is_left_alone(text: str) -> None:
    """Far more characters than the limit allows for, yet under it in tokens: a text this long is
    read before it is counted (the count may be under way elsewhere), and still left as it is."""
    limit = 200
    assert len(text) > 8 * limit and tik(text) <= limit
    assert compact_text(text, limit, tik) is None


def inventory(n: int = 25) -> dict[str, object]:
    """`pip inspect`: each package's name and version sit in its bulky metadata."""
    return {
        "version": "1",
        "installed": [
            {
                "metadata": {
                    "metadata_version": "2.4",
                    "name": f"package-{i}",
                    "version": f"{i}.0.{i % 5}",
                    "summary": "A library for " + "careful words " * 12,
                    "classifier": [f"Topic :: Software Development :: Part {k}" for k in range(20)],
                    "description": "Long description text. " * 200,
                },
                "metadata_location": f"/venv/lib/python3.11/site-packages/package_{i}.dist-info",
                "installer": "pip",
                "requested": i % 3 == 0,
            }
            for i in range(n)
        ],
    }


@pytest.mark.parametrize("budget", [409, 1024])
def test_json_objects_cut_to_their_depth_keep_their_names(budget: int) -> None:
    r = compact_text(json.dumps(inventory(), indent=2), budget, tik)
    assert r is not None and r.kind == "json" and r.tokens_after <= budget
    kept = [item for item in json.loads(r.text)["installed"] if isinstance(item, dict)]
    assert kept and all(isinstance(item["metadata"], dict) for item in kept)
    assert all({"name", "version"} <= set(item["metadata"]) for item in kept)


def test_json_spends_the_room_its_level_leaves_on_more_items() -> None:
    """The first level that fits halves the items of the one before: at 1,024 tokens it kept two
    packages of 25 in 614 tokens; more items at the same depth take the rest of the room."""
    r = compact_text(json.dumps(inventory(), indent=2), 1024, tik)
    assert r is not None and r.tokens_after <= 1024
    kept = [item for item in json.loads(r.text)["installed"] if isinstance(item, dict)]
    assert len(kept) >= 4 and r.tokens_after > 0.7 * 1024


def test_json_string_is_cut_only_where_that_saves_more_than_its_note() -> None:
    """A digest cut to `sha256:00000 [... 31 chars (10 tokens) omitted ...] 0001` saved fewer
    tokens than its note cost, and no longer named anything."""
    doc = {f"src/module_{i}.py": f"sha256:{i:064x}" for i in range(300)}
    for budget in (200, 300, 409):
        r = compact_text(json.dumps(doc, indent=2), budget, tik)
        assert r is not None and r.kind == "json" and r.tokens_after <= budget
        assert "chars (" not in r.text
        assert '"src/module_0.py": "sha256:' + "0" * 64 + '"' in r.text
