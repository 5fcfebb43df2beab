"""Stage 1 on toolchains the dev corpus does not hold (tests/pipeline/ecosystems.py): each log's
failure, its location and its verdict survive compaction, and the rules that find them do not
promote the passing chatter around them."""

from __future__ import annotations

import random

import pytest

from proxy.pipeline.compact import compact_text
from proxy.pipeline.compact.lines import read
from proxy.pipeline.compact.scoring import score_lines
from proxy.pipeline.facts import extract_facts
from proxy.pipeline.idioms.record import CONTEXT, MEDIUM, NORMAL, STRONG, SUMMARY
from tests.pipeline.counters import tik
from tests.pipeline.ecosystems import logs
from tests.pipeline.ecosystems_native import ruff_full

FILLER = [f"  step {i}: compiling module part{i}.o" for i in range(6)]


def alone(line: str) -> int:
    """The line's score among neutral lines (no context lent by neighbours)."""
    return score_lines([*FILLER, line, *FILLER])[len(FILLER)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("budget", [409, 1024])
def test_every_toolchain_keeps_its_needles(seed: int, budget: int) -> None:
    for log in logs(seed):
        done = compact_text(log.text, budget, tik)
        assert done is not None and done.tokens_after <= budget, log.name
        missing = [n for n in log.needles if n not in done.text]
        assert not missing, f"{log.name}: {missing}"


@pytest.mark.parametrize(
    ("line", "score"),
    [
        ("--- FAIL: TestDecodeHeader (0.01s)", STRONG),
        ("panic: runtime error: index out of range [3] with length 3", STRONG),
        ("ok  \tgithub.com/acme/codec/internal/bits\t0.031s", SUMMARY),
        ("[ERROR] /src/main/java/com/acme/App.java:[27,15] cannot find symbol", STRONG),
        ("[INFO] BUILD FAILURE", SUMMARY),
        ("[INFO] BUILD SUCCESS", SUMMARY),
        (
            "src/app.ts(12,5): error TS2322: Type 'string' is not assignable to type 'number'.",
            STRONG,
        ),
        ("Program.cs(10,13): error CS0103: The name 'foo' does not exist", STRONG),
        ("  12:7  error  'x' is assigned a value but never used  no-unused-vars", STRONG),
        ("Found 3 errors in 2 files.", SUMMARY),
        ("✖ 3 problems (2 errors, 1 warning)", SUMMARY),
        ("  318 passing (4s)", SUMMARY),
        ("  1 failing", SUMMARY),
        ("Plan: 3 to add, 1 to change, 0 to destroy.", SUMMARY),
        ("    1 Error(s)", SUMMARY),
        ("> Task :app:compileJava FAILED", STRONG),
        ("e: file:///home/app/src/Report.kt:57:13 Unresolved reference: totalOf", STRONG),
        ("Execution failed for task ':app:compileKotlin'.", STRONG),
        ("fatal: not a git repository (or any of the parent directories): .git", STRONG),
        ("CONFLICT (content): Merge conflict in src/app.py", STRONG),
        ("Automatic merge failed; fix conflicts and then commit the result.", SUMMARY),
        ("Command exited with non-zero status 137", SUMMARY),
        ("    Received: 100", MEDIUM),
        ("tests/test_codec.py:41: AssertionError", MEDIUM),  # pytest: where a failure was raised
        ("    Expected: 90", MEDIUM),
        # Linters: the rule code first (ruff's full format) or after the location (concise).
        ("F821 Undefined name `retry_limit`", MEDIUM),
        ("COM812 [*] Trailing comma missing", MEDIUM),
        ("src/app.py:3:1: F401 [*] `os` imported but unused", MEDIUM),
        ("app/models.py:12:0: C0114: Missing module docstring (missing-module-docstring)", MEDIUM),
    ],
)
def test_verdicts_and_errors_of_other_toolchains_are_ranked(line: str, score: int) -> None:
    assert alone(line) >= score


@pytest.mark.parametrize(
    "line",
    [
        "--- PASS: TestDecodeHeader (0.01s)",
        "=== RUN   TestDecodeHeader",
        "  12:7  warning  Unexpected console statement  no-console",
        "[INFO] Compiling 214 source files with javac [debug target 17] to target/classes",
        "> Task :app:compileJava UP-TO-DATE",
        "  ✓ handles parse cache (12 ms)",
        "Auto-merging src/billing/ledger.py",
        "src/index/codec.ts: emitted in 12ms",
        "tests/test_codec.py:12: ",  # pytest's frame line: no exception named
        "E         ",  # an empty line of pytest's assertion detail says nothing
    ],
)
def test_the_passing_chatter_around_them_is_not_promoted(line: str) -> None:
    assert alone(line) < STRONG


def test_a_line_whose_lowercase_is_longer_does_not_shift_the_scores_below_it() -> None:
    # "İ" lowercases to two characters: line-start matches must still land on their own line.
    lines = ["İİİİİİİİİİ " * 3, "plain output", "FAILED tests/test_a.py::test_b - assert 1 == 2"]
    lines += ["more output"] * 5
    scores = score_lines(lines)
    assert scores[2] >= STRONG and scores[1] < STRONG


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("budget", [409, 1024])
def test_a_lint_run_keeps_its_one_real_bug_among_the_style_nits(seed: int, budget: int) -> None:
    """ruff's full format: the quoted code frames say "error" and "exit", the diagnostics do
    not. Stage 1 keeps the verdict and the one diagnostic of its kind over the last of each
    kind seen many times (and the facts list it first among the errors: ecosystems.GENERATORS
    holds this log too)."""
    log = ruff_full(random.Random(f"{seed}:ruff_full"))
    done = compact_text(log.text, budget, tik)
    assert done is not None and done.tokens_after <= budget
    assert all(n in done.text for n in log.needles), log.needles


@pytest.mark.parametrize(
    "code",
    [
        "raise ValueError(f'invalid config: {error}')",
        "sys.exit(2)  # exit code for a usage error",
        "except OSError:  # command not found",
    ],
)
@pytest.mark.parametrize("gutter", ["  14 |     ", "14  | "])
def test_source_quoted_behind_a_numbered_gutter_is_not_an_error(gutter: str, code: str) -> None:
    """gcc, clang, rustc, ruff and Jest quote the code a diagnostic points at: its words are the
    program's, not the run's. Without the gutter the same words rank; so do they in a text
    without the gutter's bare lines (`   |`), where a numbered row is a table's (psql)."""

    def framed(line: str) -> int:
        lines = [*FILLER, "   |", line, "   |     ^~~~~", *FILLER]
        return score_lines(lines)[len(FILLER) + 1]

    assert framed(gutter + code) == NORMAL
    assert alone(code) >= MEDIUM
    assert alone(gutter + code) >= MEDIUM
    # Jest's and Babel's frames point at the failing line with `>`: a detail, never an error.
    assert framed("> 14 |   " + code) <= MEDIUM


def test_a_tables_numbered_rows_keep_their_words() -> None:
    """psql prints numbered rows behind ` | ` too, but no bare gutter lines: a failed row is
    the one the query was run for."""
    rows = [f" {i:>3} | ok     | synced {i * 7} rows" for i in range(1, 300)]
    rows[150] = " 151 | failed | connection refused by db-primary:5432"
    lines = [" id  | status | message", "-----+--------+---------", *rows, "(299 rows)"]
    assert score_lines(lines)[152] >= STRONG
    facts = extract_facts([{"role": "tool", "tool_call_id": "c", "content": "\n".join(lines)}])
    assert any("connection refused by db-primary:5432" in f for f in facts), facts


def test_a_quoted_line_still_gets_context_from_its_diagnostic() -> None:
    lines = [
        *FILLER,
        "src/ring.c:14:5: error: 'struct rb' has no member named 'capcity'",
        "   14 |     rb->capcity = capacity;",
        "      |         ^~~~~~~",
        *FILLER,
    ]
    scores = score_lines(lines)
    assert scores[len(FILLER)] == STRONG and scores[len(FILLER) + 1] == CONTEXT


def test_a_lint_report_of_quoted_source_is_a_log_not_a_document() -> None:
    """ruff quotes whole docstrings and rules off each suggested fix with `-----`: one
    diagnostic line in forty, fewer than a log's share of signal lines, and each rule looks
    like a setext heading's underline. Read as a document, its "headings" would be lines of
    quoted code; the quoted lines themselves say it is a linter's report."""
    frame = "".join(f"{k:<3} |     line {k} of the quoted docstring\n" for k in range(30))
    frame += "-" * 40 + "\n"  # ruff's rule between the code and its suggested fix
    log = ruff_full(random.Random(7))
    text = log.text.replace("    |     ^^^^^^^^^^^\n", "    |     ^^^^^^^^^^^\n" + frame)
    reading = read(text)
    assert not reading.plain and reading.what != "headings"
    done = compact_text(text, 409, tik)
    assert done is not None and all(n in done.text for n in log.needles)


@pytest.mark.parametrize(
    "line",
    [
        "import time:       215 |        215 |   email.errors",  # python -X importtime
        "import time:       310 |       1024 | urllib3.exceptions",
        "│ │ ├── es-errors@1.3.0 deduped",  # npm ls
        "npm http fetch GET 200 https://registry.npmjs.org/ajv-errors 12ms (cache miss)",
        '    "assertion-error": {',  # npm ls --json
        "-rw-r--r-- 1 user user  4213 Nov 30 09:12 errors.py",  # ls -l
        "│ ├── UNMET OPTIONAL DEPENDENCY fsevents@^2.3.2",  # not installed on Linux, by design
    ],
)
def test_a_name_holding_an_error_word_is_no_error(line: str) -> None:
    """A module, package or file named for errors says nothing went wrong; the same words
    standing alone in a sentence still rank."""
    assert alone(line) == NORMAL


@pytest.mark.parametrize(
    "line",
    [
        "build finished with 3 errors.",
        "warning: unused variable 'x' [-Wunused-variable]",
        "│ ├── UNMET DEPENDENCY left-pad@^1.3.0",
        "Could not import module; the email errors are fatal",
    ],
)
def test_error_words_in_a_sentence_still_rank(line: str) -> None:
    assert alone(line) >= MEDIUM


@pytest.mark.parametrize(
    ("line", "least"),
    [
        ("      ✕ applies 8.25% tax and rounds half up (1 ms)", STRONG),  # Jest, Vitest
        ("  ✗ rejects an empty cart", STRONG),
        ("  ● pricing › group 2 › applies 8.25% tax and rounds half up", MEDIUM),  # Jest
        ("  1) TokenBucket#headers", MEDIUM),  # mocha's failure report
        ("  left: 2500", MEDIUM),  # Rust's assert_eq!
        (" right: 2499", MEDIUM),
        ("src/mod27.cpp:13:14:   required from here", MEDIUM),  # g++'s template backtrace
        ('{"level":50,"time":1764600024050,"msg":"batch failed","batch":26}', STRONG),  # pino
        ('{"level": 60, "msg": "cannot continue"}', STRONG),
        ("    billing_test.go:78: Total() = 1550, want 1395", MEDIUM),  # Go's t.Errorf idiom
        ("    parse_test.go:12: got 3 tokens, want 4", MEDIUM),
        ("[pid 20429] +++ exited with 1 +++", SUMMARY),  # strace
    ],
)
def test_test_runners_failure_lines_rank(line: str, least: int) -> None:
    assert alone(line) >= least


def test_a_pino_info_line_is_ordinary() -> None:
    assert alone('{"level":30,"time":1764600024050,"msg":"batch committed","batch":25}') == NORMAL


def jest_verbose(rng: random.Random) -> tuple[str, list[str]]:
    """`jest --verbose`: hundreds of passing tests, three failing in the middle."""
    lines, failed = ["FAIL __tests__/pricing.test.js", "  pricing"], []
    for g in range(12):
        lines.append(f"    group {g}")
        for t in range(20):
            if (g, t) in ((3, 7), (6, 2), (9, 15)):
                name = f"applies rule {g}.{t} to a mixed cart"
                failed.append(f"✕ {name} ({rng.randint(1, 9)} ms)")
                lines.append(f"      {failed[-1]}")
            else:
                ms = f" ({rng.randint(1, 9)} ms)" if rng.random() < 0.3 else ""
                lines.append(f"      ✓ handles case {g}-{t} (n={rng.randint(10, 500)}){ms}")
    lines += ["", "Tests:       3 failed, 237 passed, 240 total", "Time:        1.39 s"]
    return "\n".join(lines), failed


@pytest.mark.parametrize("seed", range(3))
def test_a_verbose_jest_run_keeps_its_failed_tests(seed: int) -> None:
    text, failed = jest_verbose(random.Random(seed))
    done = compact_text(text, 409, tik)
    assert done is not None and done.tokens_after <= 409
    assert all(f in done.text for f in failed), failed


def eslint_stylish(files: int = 30, bad: int = 17) -> str:
    """ESLint's default report: a file's path, then its diagnostics located by `line:col`."""
    out = []
    for f in range(files):
        out.append(f"/home/user/app/src/module_{f}.js")
        for k in range(6):
            out.append(f"  {k * 7 + 3}:5  warning  'tmp{k}' is never used  no-unused-vars")
        if f == bad:
            out.append("  61:9  error    'formatCents' is not defined  no-undef")
        out.append("")
    out.append(f"✖ {files * 6 + 1} problems (1 error, {files * 6} warnings)")
    return "\n".join(out)


def test_an_eslint_errors_file_header_is_its_context() -> None:
    """Kept without its group's header, the error would read as the previous file's."""
    text = eslint_stylish()
    lines = text.split("\n")
    header = lines.index("/home/user/app/src/module_17.js")
    assert score_lines(lines)[header] == CONTEXT
    assert score_lines(lines)[header - 8] == NORMAL  # a file holding only warnings
    done = compact_text(text, 409, tik)
    assert done is not None
    kept = done.text.split("\n")
    error = kept.index("  61:9  error    'formatCents' is not defined  no-undef")
    before = [line for line in kept[:error] if line.startswith("/home/")]
    assert before and before[-1] == "/home/user/app/src/module_17.js"


def test_a_long_verdict_line_is_kept_whole() -> None:
    """pip's last line names every package installed: a quarter of the budget would cut the
    middle ones out of it; a verdict may take half."""
    packages = " ".join(f"sphinxcontrib-module{i}-{i % 7}.{i % 3}.0" for i in range(16))
    lines = [f"  Downloading package_{i}-1.0-py3-none-any.whl (12 kB)" for i in range(300)]
    lines += [f"Successfully installed {packages}", "[exit code: 0]"]
    assert 409 // 4 < tik(lines[-2]) < 409 // 2
    done = compact_text("\n".join(lines), 409, tik)
    assert done is not None and done.tokens_after <= 409
    assert lines[-2] in done.text.split("\n")


def test_among_errors_a_long_one_goes_after_the_short_ones() -> None:
    """One error line that costs an eighth of the budget or more is worth less than the several
    short ones its room holds: nearness to an end no longer decides between them."""
    flags = " ".join(f"-DOPTION_{k}=value_{k}" for k in range(30))
    lines = [f"compiling unit {i} of the extension" for i in range(300)]
    lines[120] = "src/ring.c:14:5: error: 'struct rb' has no member named 'capcity'"
    lines[200] = "src/ring.c:31:9: error: implicit declaration of function 'rb_free'"
    lines[280] = f"error: command 'gcc {flags}' failed: the compiler returned 1 errors"
    assert tik(lines[280]) > 409 // 8
    done = compact_text("\n".join(lines), 409, tik)
    assert done is not None and done.tokens_after <= 409
    assert lines[120] in done.text and lines[200] in done.text


def test_the_line_before_a_traceback_says_what_failed() -> None:
    """Sphinx's `WARNING: autodoc: failed to import ...` and a logger's `logger.exception`
    message stand right above the traceback they introduce."""
    lines = [
        *FILLER,
        "WARNING: autodoc: failed to import 'sliced_strict' from module 'more_itertools'",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.11/site-packages/sphinx/util/inspect.py", line 40, in get',
        "    return getattr(obj, name)",
        "AttributeError: module 'more_itertools' has no attribute 'sliced_strict'",
        *FILLER,
    ]
    scores = score_lines(lines)
    assert scores[len(FILLER)] >= CONTEXT
    quiet = [*FILLER, "loading pickled environment... done", *lines[len(FILLER) + 1 :]]
    assert score_lines(quiet)[len(FILLER)] >= CONTEXT  # whatever it says, it comes first
