"""Facts listed under the trim marker: how each command ended comes first."""

from __future__ import annotations

import os

import pytest

from proxy.pipeline import Policy, compute_budget, shrink
from proxy.pipeline.compact.scoring import glued_reports
from proxy.pipeline.facts import (
    CATEGORIES,
    LINE_CATEGORIES,
    MAX_FACT_CHARS,
    extract_facts,
    normalise,
)
from proxy.tokenizers import Tokenizers
from tests.pipeline import ecosystems

COUNTER = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen")


def tool(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "c", "content": text}


def test_a_commands_last_status_line_is_a_fact():
    out = "Processing ./pkg\nSuccessfully installed pkg-1.0\n"
    out += "151 CA certificates loaded\n[exit code: 0]"
    facts = extract_facts([tool(out)])
    assert "151 CA certificates loaded" in facts
    assert "Successfully installed pkg-1.0" in facts


def test_test_summary_and_last_error_lead_the_list():
    run = (
        "collected 3 items\n"
        + "x = 1\n" * 50
        + "FAILED t.py::a - ValueError\n1 failed, 2 passed in 0.1s\n"
    )
    usage = "usage: tool [-h]\ntool: error: unrecognized arguments: --bad\n[exit code: 2]"
    facts = extract_facts([tool(run), tool(usage)])
    assert facts[:2] == ["1 failed, 2 passed in 0.1s", "tool: error: unrecognized arguments: --bad"]


def test_listings_footers_and_warning_filters_are_not_facts():
    listing = "    1\timport os\n    2\tprint(os.sep)\n[exit code: 0]"
    facts = extract_facts(
        [tool(listing), {"role": "user", "content": "run pytest -W error::Warning"}]
    )
    assert not any("import os" in f or "exit code" in f or "error::" in f for f in facts)


# --- partial lines go after the whole lines of their kind --------------------------------------

LONG_INSTALL = "Successfully installed " + " ".join(f"package{i}-{i}.0.1" for i in range(40))
BUILT = "Successfully built demo-1.0-py3-none-any.whl"


def test_a_clipped_line_comes_after_the_whole_lines_and_before_the_names():
    span = [
        tool(f"Collecting package0\n{LONG_INSTALL}\n[exit code: 0]"),
        tool(f"running bdist_wheel\nwrote /src/demo/build.log\n{BUILT}\n[exit code: 0]"),
    ]
    facts = extract_facts(span)
    clipped = next(f for f in facts if f.startswith("Successfully installed package0-0.0.1"))
    assert len(clipped) <= MAX_FACT_CHARS < len(LONG_INSTALL)
    # First seen, but listed after the later whole line; still before every name (a path).
    assert facts.index(BUILT) < facts.index(clipped) < facts.index("/src/demo/build.log")


def test_a_line_cut_by_stage_one_comes_after_the_whole_lines():
    elided = "[... 420 chars (158 tokens) omitted by shrink-proxy ...]"
    cut = f"Successfully installed a-1 b-2 {elided} z-9"
    facts = extract_facts([tool(f"Collecting a\n{cut}\n"), tool(f"running build\n{BUILT}\n")])
    assert facts.index(BUILT) < facts.index(cut)


def test_whole_lines_keep_the_order_they_were_picked_in():
    span = [tool("Collecting a\nSuccessfully installed a-1\n"), tool(f"running build\n{BUILT}\n")]
    assert extract_facts(span)[:2] == ["Successfully installed a-1", BUILT]


def test_the_second_round_stays_after_the_first_when_a_line_is_partial():
    span = [
        tool(f"Collecting a\n{LONG_INSTALL} done\n"),
        tool(f"see /a/b.py\nrunning build\n{BUILT}\n"),
    ]
    facts = extract_facts(span, quotas={"statuses": (1, 1), "paths": (2, 2)})
    assert facts[1:] == ["/a/b.py", BUILT]  # BUILT came in the second round, past its quota
    assert facts[0].startswith("Successfully installed package0")


def test_the_trim_marker_spends_its_room_on_whole_lines_first():
    """End to end: a long clipped install line seen first no longer eats the facts' room."""
    msgs: list[dict] = [{"role": "system", "content": "sys"}]
    outputs = [
        f"Collecting x\n{LONG_INSTALL}\n[exit code: 0]",
        f"building\n{BUILT}\n[exit code: 0]",
    ]
    outputs += [f"step {t}\nstep {t} finished fine\n" for t in range(20)]
    for t, out in enumerate(outputs):
        msgs.append({"role": "user", "content": f"do step {t} " + "please " * 200})
        call = {"id": f"c{t}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": out})
    msgs.append({"role": "user", "content": "what was built?"})
    budget = compute_budget(4096, 512, default_reserve=256, floor=128, margin_share=0.02)
    plan = shrink(
        msgs, budget=budget, counter=COUNTER, policy=Policy(facts_tokens=110, facts_window_share=0)
    )
    marker = plan.messages[plan.marker_index]["content"]
    assert BUILT in marker
    assert plan.report.fits


# --- other toolchains: how their runs end, their errors and where these happened -------------

CHATTER = "step 1 done\nstep 2 done\n"

# (tool output, the fact it must give, whether that fact is the output's verdict: first listed)
TOOLCHAIN_FACTS = [
    # go test: the failing test, its package's verdict, a passing package, panics, build errors
    ("=== RUN   TestA\n--- FAIL: TestA (0.01s)\nFAIL\n", "--- FAIL: TestA (0.01s)", False),
    (
        CHATTER + "FAIL\tgithub.com/acme/codec\t0.412s\nFAIL\n",
        "FAIL github.com/acme/codec 0.412s",
        True,
    ),
    (
        CHATTER + "FAIL\tgithub.com/acme/x [build failed]\n",
        "FAIL github.com/acme/x [build failed]",
        True,
    ),
    (
        CHATTER + "ok  \tgithub.com/acme/bits\t0.031s\nPASS\n",
        "ok github.com/acme/bits 0.031s",
        False,
    ),
    (CHATTER + "panic: boom\n\ngoroutine 1 [running]:\n", "panic: boom", True),
    (
        "thread 'main' panicked at src/main.rs:4:5:\nboom\n",
        "thread 'main' panicked at src/main.rs:4:5:",
        True,
    ),
    (
        "# acme/codec\n./codec.go:12:5: undefined: frob\n./codec.go:14:2: declared and not used\n",
        "./codec.go:12:5: undefined: frob",
        False,
    ),
    # A test's own message, just above its `--- FAIL:` line (go test -v) or just below it.
    (
        "=== RUN   TestA\n    a_test.go:18: got 3, want 4\n--- FAIL: TestA (0.00s)\n",
        "a_test.go:18: got 3, want 4",
        False,
    ),
    (
        "--- FAIL: TestA (0.00s)\n    a_test.go:18: got 3, want 4\nFAIL\n",
        "a_test.go:18: got 3, want 4",
        True,
    ),
    # Jest, Vitest, Mocha, cargo test, dotnet test
    (CHATTER + " FAIL  src/cart/discount.test.ts\n", "FAIL src/cart/discount.test.ts", True),
    (
        "  ● Cart › applies the discount\n\n    expect(x).toBe(y)\n",
        "● Cart › applies the discount",
        True,
    ),
    (
        "    expect(received).toBe(expected)\n\n    Expected: 90\n    Received: 100\n",
        "Expected: 90",
        False,
    ),
    (
        "    expect(received).toBe(expected)\n\n    Expected: 90\n    Received: 100\n",
        "Received: 100",
        True,
    ),
    (
        " FAIL  src/a.test.ts\nTests:       1 failed, 391 passed, 392 total\nTime: 3 s\n",
        "Tests: 1 failed, 391 passed, 392 total",
        True,
    ),
    (" Test Files  1 failed | 3 passed (4)\n", "Test Files 1 failed | 3 passed (4)", True),
    ("  318 passing (4s)\n  1 failing\n\n  1) Ledger\n", "1 failing", True),
    (
        "test result: FAILED. 3 passed; 1 failed; 0 ignored\n\nerror: test failed\n",
        "test result: FAILED. 3 passed; 1 failed; 0 ignored",
        True,
    ),
    (
        "Failed!  - Failed:     1, Passed:   391, Total:   392\n",
        "Failed! - Failed: 1, Passed: 391, Total: 392",
        True,
    ),
    # Maven, Gradle, MSBuild, Kotlin
    (
        CHATTER + "[ERROR] /w/Ledger.java:[88,24] cannot find symbol\n",
        "[ERROR] /w/Ledger.java:[88,24] cannot find symbol",
        True,
    ),
    (CHATTER + "[FATAL] Non-resolvable parent POM\n", "[FATAL] Non-resolvable parent POM", True),
    (
        "2024-05-01 10:00:00 [CRITICAL] disk full\nretrying\n",
        "2024-05-01 10:00:00 [CRITICAL] disk full",
        True,
    ),
    (
        "[INFO] BUILD FAILURE\n[ERROR] Failed to execute goal x: Compilation failure\n",
        "[INFO] BUILD FAILURE",
        True,
    ),
    (
        "error: flaky fetch, retrying\nBUILD SUCCESSFUL in 5s\n12 actionable tasks: 12 executed\n",
        "BUILD SUCCESSFUL in 5s",
        True,
    ),
    (
        "e: file:///w/Report.kt:57:13 Unresolved reference: totalOf\n",
        "e: file:///w/Report.kt:57:13 Unresolved reference: totalOf",
        True,
    ),
    (
        "* What went wrong:\nExecution failed for task ':app:compileKotlin'.\n"
        "\n* Try:\n> Run with --info\n",
        "Execution failed for task ':app:compileKotlin'.",
        True,
    ),
    ("Build succeeded.\n    0 Warning(s)\n    0 Error(s)\n", "Build succeeded.", False),
    ("Build FAILED.\n\n    0 Warning(s)\n    1 Error(s)\n", "1 Error(s)", True),
    (
        "Program.cs(31,17): error CS0103: The name 'cfg' does not exist\n",
        "Program.cs(31,17): error CS0103: The name 'cfg' does not exist",
        True,
    ),
    # TypeScript, ESLint
    (
        "src/a.ts(112,7): error TS2322: Type 'string' is not assignable\n",
        "src/a.ts(112,7): error TS2322: Type 'string' is not assignable",
        True,
    ),
    (
        "a.ts(3,1): error TS1005: ';' expected.\n\n"
        "[12:00:01 PM] Found 1 error. Watching for file changes.\n",
        "[12:00:01 PM] Found 1 error. Watching for file changes.",
        True,
    ),
    (
        "/w/a.js\n  77:9  error  'total' is never used  no-unused-vars\n\n",
        "77:9 error 'total' is never used no-unused-vars",
        True,
    ),
    (
        "/w/a.js\n  7:9  warning  x  no-console\n\n✖ 3 problems (1 error, 2 warnings)\n"
        "  0 errors and 2 warnings potentially fixable with the `--fix` option.\n",
        "✖ 3 problems (1 error, 2 warnings)",
        True,
    ),
    # Python's linters: a diagnostic's rule code (flake8, ruff --output-format concise, pylint)
    (
        "src/app.py:1:8: F401 [*] `os` imported but unused\nFound 1 error.\n",
        "src/app.py:1:8: F401 [*] `os` imported but unused",
        False,
    ),
    (
        "./src/app.py:9:1: E302 expected 2 blank lines, found 1\n",
        "./src/app.py:9:1: E302 expected 2 blank lines, found 1",
        True,
    ),
    (
        "************* Module app\napp.py:1:0: C0114: Missing module docstring\n",
        "app.py:1:0: C0114: Missing module docstring",
        True,
    ),
    # A failed state in a status table: kubectl get pods / nodes, docker ps
    (
        "NAME      READY   STATUS             RESTARTS   AGE\n"
        "api-1     1/1     Running            0          3d\n"
        "web-2     0/1     CrashLoopBackOff   12         40m\n"
        "db-3      1/1     Running            0          3d\n",
        "web-2 0/1 CrashLoopBackOff 12 40m",
        True,
    ),
    (
        "NAME     STATUS     ROLES    AGE   VERSION\nnode-a   Ready      <none>   9d    v1.31.2\n"
        "node-b   NotReady   <none>   9d    v1.31.2\nnode-c   Ready      <none>   9d    v1.31.2\n",
        "node-b NotReady <none> 9d v1.31.2",
        True,
    ),
    (
        "CONTAINER ID   STATUS                     NAMES\n"
        "3f2a9c1b7d10   Exited (137) 2 hours ago   app_1\n"
        "9e8d7c6b5a40   Up 3 days                  app_2\n",
        "3f2a9c1b7d10 Exited (137) 2 hours ago app_1",
        True,
    ),
    # An application log's error level (Python's logging, logback, a JSON logger)
    (
        "2026-11-30 09:12:01,120 INFO app.worker: batch 7 done\n"
        "2026-11-30 09:12:02,310 ERROR app.worker: lost the db connection\n"
        "2026-11-30 09:12:03,005 INFO app.worker: batch 8 done\n",
        "2026-11-30 09:12:02,310 ERROR app.worker: lost the db connection",
        True,
    ),
    (
        "09:12:02.310 [main] INFO  c.a.Worker - batch 7 done\n"
        "09:12:02.311 [main] FATAL c.a.Worker - out of file handles\n"
        "09:12:02.312 [main] INFO  c.a.Worker - shutting down\n",
        "09:12:02.311 [main] FATAL c.a.Worker - out of file handles",
        True,
    ),
    (
        '{"level":"info","msg":"batch 7 done"}\n{"level":"error","msg":"lost the db"}\n'
        '{"level":"info","msg":"batch 8 done"}\n',
        '{"level":"error","msg":"lost the db"}',
        True,
    ),
    # A failed system call's message in a Go program's log (lowercase, no level, no "error")
    (
        "2026/11/30 09:12:02 loading /etc/api.yaml\n"
        "2026/11/30 09:12:03 listen tcp :8080: bind: address already in use\nexit status 1\n",
        "2026/11/30 09:12:03 listen tcp :8080: bind: address already in use",
        True,
    ),
    (
        "open config.yaml: no such file or directory\n",
        "open config.yaml: no such file or directory",
        True,
    ),
    # GitHub Actions' annotations, behind `gh run view --log-failed`'s job, step and time
    (
        "test\tRun pytest\t2026-11-30T09:13:01.12Z ::error file=src/a.py,line=12::Type mismatch\n"
        "test\tRun pytest\t2026-11-30T09:13:01.13Z tests/test_b.py::test_c PASSED\n",
        "test Run pytest 2026-11-30T09:13:01.12Z ::error file=src/a.py,line=12::Type mismatch",
        True,
    ),
    (
        "build\tCompile\t2026-11-30T09:13:01.12Z ##[error]Process completed with exit code 2.\n"
        "build\tPost\t2026-11-30T09:13:02.00Z Cleaning up orphan processes\n",
        "build Compile 2026-11-30T09:13:01.12Z ##[error]Process completed with exit code 2.",
        True,
    ),
    # git, docker (BuildKit's `#12 ` step prefix is not a comment)
    (
        "CONFLICT (content): Merge conflict in src/a.py\nerror: could not apply 1a2b3c4... fix\n"
        'hint: Resolve all conflicts manually, then run "git rebase --continue".\n',
        "CONFLICT (content): Merge conflict in src/a.py",
        False,
    ),
    (
        "CONFLICT (content): x\nAutomatic merge failed; fix conflicts and then commit the result.\n"
        "$ git status --short\nUU a.py\n",
        "Automatic merge failed; fix conflicts and then commit the result.",
        True,
    ),
    (
        "#12 4.211 src/main.ts:9:1 - error: Cannot find module './routes'\n#12 DONE\n",
        "#12 4.211 src/main.ts:9:1 - error: Cannot find module './routes'",
        True,
    ),
    # Where an error happened, on the line after it: listed, but never the verdict.
    (
        "error[E0308]: mismatched types\n  --> src/ledger.rs:214:27\n    |\n",
        "--> src/ledger.rs:214:27",
        False,
    ),
    (
        "AssertionError: expected -5 to equal 5\n"
        "    at Context.<anonymous> (test/l.spec.js:64:28)\n",
        "at Context.<anonymous> (test/l.spec.js:64:28)",
        False,
    ),
    (
        "Unhandled exception. System.Exception: boom\n"
        "   at Api.Program.Main() in /src/Program.cs:line 31\n",
        "at Api.Program.Main() in /src/Program.cs:line 31",
        False,
    ),
    (
        'Error: Unsupported attribute\n\n  on main.tf line 48, in resource "x" "y":\n',
        'on main.tf line 48, in resource "x" "y":',
        False,
    ),
    (
        "╷\n│ Error: Unsupported attribute\n│ \n│   on main.tf line 48, in resource:\n"
        "│   48:   role = aws_iam_role.lambda.arnn\n│ \n"
        "│ This object has no attribute named arnn.\n╵\n",
        "│ on main.tf line 48, in resource:",
        False,
    ),
    (  # the error stays the verdict, not its location
        'Error: Unsupported attribute\n\n  on main.tf line 48, in resource "x" "y":\n',
        "Error: Unsupported attribute",
        True,
    ),
    # yarn, pnpm, PHPUnit, Docker, network tools, unittest, CMake, apt
    (
        "$ tsc -p .\nerror Command failed with exit code 2.\ninfo Visit https://x\n",
        "error Command failed with exit code 2.",
        True,
    ),
    (
        'error An unexpected error occurred: "https://r/left-pad: Not found".\n',
        'error An unexpected error occurred: "https://r/left-pad: Not found".',
        True,
    ),
    (
        " ERR_PNPM_RECURSIVE_RUN_FIRST_FAIL  web@1.0.0 build: `vite build`\nExit status 1\n",
        "ERR_PNPM_RECURSIVE_RUN_FIRST_FAIL web@1.0.0 build: `vite build`",
        True,
    ),
    (
        " ELIFECYCLE  Command failed with exit code 1.\n",
        "ELIFECYCLE Command failed with exit code 1.",
        True,
    ),
    (
        "1) CalcTest::testAdd\nFailed asserting that 4 matches expected 5.\n\nFAILURES!\n"
        "Tests: 4, Assertions: 4, Failures: 1.\n",
        "Tests: 4, Assertions: 4, Failures: 1.",
        True,
    ),
    (
        "1) CalcTest::testAdd\nFailed asserting that 4 matches expected 5.\n\nFAILURES!\n",
        "Failed asserting that 4 matches expected 5.",
        False,
    ),
    (
        "docker: Error response from daemon: pull access denied for acme/web.\n"
        "See 'docker run --help'.\n",
        "docker: Error response from daemon: pull access denied for acme/web.",
        True,
    ),
    (
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: "
        "Couldn't connect to server\n",
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Couldn't connect to server",
        True,
    ),
    (
        "ssh: connect to host example.com port 22: Connection refused\n",
        "ssh: connect to host example.com port 22: Connection refused",
        True,
    ),
    (
        "fatal: unable to access 'https://h/r.git/': Could not resolve host: h\n",
        "fatal: unable to access 'https://h/r.git/': Could not resolve host: h",
        True,
    ),
    (
        CHATTER + "FAIL: test_add (tests.test_calc.CalcTests.test_add)\n",
        "FAIL: test_add (tests.test_calc.CalcTests.test_add)",
        True,
    ),
    (
        "Ran 5 tests in 0.002s\n\nFAILED (failures=1, errors=1)\n",
        "FAILED (failures=1, errors=1)",
        True,
    ),
    (
        "CMake Error at CMakeLists.txt:14 (find_package):\n  Could not find Zstd\n\n"
        "-- Configuring incomplete, errors occurred!\n",
        "-- Configuring incomplete, errors occurred!",
        True,
    ),
    (
        "CMake Error at CMakeLists.txt:14 (find_package):\n  Could not find Zstd\n",
        "CMake Error at CMakeLists.txt:14 (find_package):",
        True,
    ),
    (
        "Reading package lists...\n"
        "0 upgraded, 2 newly installed, 0 to remove and 12 not upgraded.\n"
        "Setting up libz-dev (1.2) ...\n",
        "0 upgraded, 2 newly installed, 0 to remove and 12 not upgraded.",
        False,
    ),
]


@pytest.mark.parametrize(("output", "fact", "verdict"), TOOLCHAIN_FACTS)
def test_other_toolchains_lines_are_facts(output: str, fact: str, verdict: bool) -> None:
    facts = extract_facts([tool(output)])
    assert fact in facts
    if verdict:
        assert facts[0] == fact


@pytest.mark.parametrize(
    "output",
    [
        "  ● Console\n\n    console.log\n      hello\n",  # Jest's console block, not a failure
        "[ERROR] \n[INFO] \n",  # an empty log line
        "    a_test.go:18: cache warmed\n--- PASS: TestA (0.00s)\n",  # t.Log of a passing test
        "warning: unused variable: `x`\n  --> src/main.rs:2:9\n",  # a warning's location
        "# error: not really\n#12: done\n",  # comments
        "Build succeeded. Quick import smoke test of both libraries passed\n",  # prose
        "SUMMARY: all 12 checks green\nRan the linters in two passes\n",  # not a runner's
        "==4242== definitely lost: 0 bytes in 0 blocks\n==4242== All heap blocks were freed\n",
        "WARNING: cache is cold, first build will be slow\nOK (cached)\n",
        "1 - Introduction (draft)\n2 - Setup\n",  # a numbered list, not CTest's
        "09:12:33: A1234 boarded at gate 4\nsrc/a.py:12: TODO1 later\n",  # no path:line:col
        "3f2a9c1b7d10   Exited (0) 2 hours ago   app_1\nretries use an exponential backoff\n",
        # a config and a JSON line whose level is not an error
        'LOG_LEVEL=ERROR\n{"level":"info","msg":"no error seen"}\nset the level to FATAL\n',
    ],
)
def test_lookalikes_of_those_lines_are_not(output: str) -> None:
    reports = ("verdicts", "outcomes", "errors", "successes")  # not statuses, not names
    assert extract_facts([tool(output)], quotas={c: CATEGORIES[c] for c in reports}) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_toolchains_needles_are_facts(seed: int) -> None:
    """A dropped span holding one long log of each toolchain of tests/pipeline/ecosystems.py lists
    its needles; a JSON listing's failing item is its verdict. Facts are whitespace-normalised,
    so the needles are compared that way."""
    for log in ecosystems.logs(seed):
        call = {"id": "c", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        span = [{"role": "assistant", "content": None, "tool_calls": [call]}, tool(log.text)]
        facts = extract_facts(span)
        missing = [n for n in log.needles if not any(normalise(n) in f for f in facts)]
        assert not missing, (log.name, missing, facts)
        if log.kind == "json":
            assert all(normalise(n) in facts[0] for n in log.needles), (log.name, facts)


def test_valgrinds_report_is_read_behind_its_pid_prefix() -> None:
    """Memcheck's errors, where they happened and its summary; a clean leak summary says nothing."""
    v = "==4242=="
    out = "\n".join(
        [
            f"{v} Memcheck, a memory error detector",
            f"{v} Use of uninitialised value of size 8",
            f"{v}    at 0x4011A2: parse_header (codec.c:88)",
            f"{v} ",
            f"{v} LEAK SUMMARY:",
            f"{v}    definitely lost: 0 bytes in 0 blocks",
            f"{v}    possibly lost: 64 bytes in 2 blocks",
            f"{v} ERROR SUMMARY: 1 errors from 1 contexts (suppressed: 0 from 0)",
            "[exit code: 0]",
        ]
    )
    lines = {c: quota for c, quota in CATEGORIES.items() if c in LINE_CATEGORIES}
    facts = extract_facts([tool(out)], quotas=lines)
    assert facts == [
        "ERROR SUMMARY: 1 errors from 1 contexts (suppressed: 0 from 0)",
        "possibly lost: 64 bytes in 2 blocks",
        "Use of uninitialised value of size 8",
        "at 0x4011A2: parse_header (codec.c:88)",
    ]
    clean = f"{v} All heap blocks were freed -- no leaks are possible\n"
    clean += f"{v} ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 0 from 0)"
    assert extract_facts([tool(clean)])[0] == (
        "ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 0 from 0)"
    )


def test_a_report_line_glued_to_the_programs_output_is_read_from_its_pid() -> None:
    """stdout piped is flushed in blocks, Valgrind's stderr at once: in combined output the
    report's first line can follow half a line of the program's own."""
    v = "==4242=="
    out = "\n".join(
        [
            "round 1: pushed 10 items",
            f"round 2: pus{v} Invalid write of size 4",
            f"{v}    at 0x109234: rb_push (ringbuf.c:42)",
            f"{v} ",
            "hed 10 items",
            f"{v} ERROR SUMMARY: 1 errors from 1 contexts (suppressed: 0 from 0)",
        ]
    )
    lines = {c: quota for c, quota in CATEGORIES.items() if c in LINE_CATEGORIES}
    facts = extract_facts([tool(out)], quotas=lines)
    assert "Invalid write of size 4" in facts
    assert "at 0x109234: rb_push (ringbuf.c:42)" in facts
    # A prefix at a line's start, or the tail of a rule of "=", is not glued.
    assert glued_reports("a==1== b\n==2== c\n====3== d\n") == [1]


def test_npms_pointers_to_its_log_are_neither_verdict_nor_status() -> None:
    out = "\n".join(
        [
            "npm error code ENOTCACHED",
            "npm error request to https://registry.npmjs.org/left-pad failed: cache mode is"
            " 'only-if-cached' but no cached response is available.",
            "npm error For a full report see:",
            "npm error /home/user/.npm/_logs/eresolve-report.txt",
            "npm error A complete log of this run can be found in: /home/user/.npm/_logs/x.log",
            "[exit code: 1]",
        ]
    )
    lines = {c: quota for c, quota in CATEGORIES.items() if c in LINE_CATEGORIES}
    facts = extract_facts([tool(out)], quotas=lines)
    assert not any("A complete log" in f or "For a full report" in f for f in facts), facts
    assert not any(f.startswith("npm error /") for f in facts), facts  # the report's path
    assert "npm error code ENOTCACHED" in facts


def test_source_quoted_under_a_diagnostic_is_not_an_error_fact() -> None:
    """gcc, rustc and ruff quote the code a diagnostic points at behind a numbered gutter; its
    words ("OSError", "error") are the program's. The diagnostic and its location are facts."""
    output = "\n".join(
        [
            "src/net.c:57:9: error: 'errno_text' undeclared (first use in this function)",
            "   57 |     if (err) return errno_text(ERROR_TIMEOUT);",
            "      |                     ^~~~~~~~~~",
            "F821 Undefined name `retry_limit`",
            "   --> src/sync.py:88:12",
            "    |",
            "87  |     except OSError as error:",
            "88  |         raise SyncError(f'gave up after {retry_limit} tries') from error",
            "    |                                          ^^^^^^^^^^^",
            "Found 1 error.",
        ]
    )
    facts = extract_facts([tool(output)])
    assert "src/net.c:57:9: error: 'errno_text' undeclared (first use in this function)" in facts
    assert "F821 Undefined name `retry_limit`" in facts
    assert "--> src/sync.py:88:12" in facts
    assert not [f for f in facts if "|" in f], facts


def test_a_long_failure_line_keeps_its_test_id_and_exception_type():
    from proxy.pipeline.facts import MAX_FACT_CHARS, _clip

    test = "tests/test_api.py::test_parse[" + "case-" * 60 + "last]"
    line = f"FAILED {test} - AssertionError: expected 3 got {'4' * 300}"
    fact = _clip(line)
    assert len(fact) <= MAX_FACT_CHARS
    assert fact.startswith("FAILED tests/test_api.py::test_parse[case-")
    assert "last] - AssertionError: expected 3 got 4" in fact
    short = "FAILED tests/t.py::test_x - ValueError: " + "bad " * 100
    assert _clip(short).startswith("FAILED tests/t.py::test_x - ValueError: bad bad")
