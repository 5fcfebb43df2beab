"""Long tool outputs from toolchains the dev corpus does not hold, each with the lines a model
must still see after stage 1 (its "needles"): Go, Rust, Jest, Mocha, Maven, Gradle, TypeScript,
ESLint, .NET, Terraform, Docker, git, Valgrind, unittest, CTest, RSpec, AddressSanitizer, CMake,
apt; and two JSON listings (Kubernetes pods, CI runs) where one item of hundreds reports the
failure.

The dev corpus is mostly Python and npm; the rules of `scoring` are meant for the shapes build and
test tools share, not for those two. These logs check that on outputs written the way each tool
writes them: long passing chatter (varied by a seed) with the failure, its location and the verdict
somewhere in the middle or at the end. They are written from the tools' documented formats, not
tuned to any rule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Log:
    name: str
    text: str
    needles: tuple[str, ...]
    kind: str = "log"  # or "json": a document stage 1 rebuilds as JSON


def _words(rng: random.Random, n: int) -> str:
    pool = ["parse", "config", "cache", "router", "index", "worker", "client", "schema", "codec"]
    return "_".join(rng.choice(pool) for _ in range(n))


def go_test(rng: random.Random) -> Log:
    lines = []
    for i in range(rng.randint(150, 260)):
        name = f"Test{_words(rng, 2).title().replace('_', '')}{i}"
        lines += [f"=== RUN   {name}", f"--- PASS: {name} (0.0{rng.randint(0, 9)}s)"]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4) // 2 * 2
    failing = [
        "=== RUN   TestDecodeHeader",
        '    codec_test.go:118: DecodeHeader("v2") = 3, want 4',
        "--- FAIL: TestDecodeHeader (0.01s)",
    ]
    lines[at:at] = failing
    lines += [
        "FAIL",
        "FAIL\tgithub.com/acme/codec\t0.412s",
        "ok  \tgithub.com/acme/codec/internal/bits\t0.031s",
        "FAIL",
    ]
    return Log(
        "go test",
        "\n".join(lines),
        ('DecodeHeader("v2") = 3, want 4', "--- FAIL: TestDecodeHeader"),
    )


def cargo_build(rng: random.Random) -> Log:
    lines = [
        f"   Compiling {_words(rng, 1)}-{i} v0.{rng.randint(1, 30)}.{rng.randint(0, 9)}"
        for i in range(rng.randint(200, 320))
    ]
    lines += [
        "error[E0308]: mismatched types",
        "  --> src/ledger.rs:214:27",
        "    |",
        "214 |     let total: u64 = entry.amount.parse();",
        "    |                ---   ^^^^^^^^^^^^^^^^^^^^ expected `u64`, found `Result<_, _>`",
        "    |                |",
        "    |                expected due to this",
        "",
        "For more information about this error, try `rustc --explain E0308`.",
        "error: could not compile `ledger` (lib) due to 1 previous error",
    ]
    return Log(
        "cargo build",
        "\n".join(lines),
        ("error[E0308]: mismatched types", "src/ledger.rs:214:27", "could not compile `ledger`"),
    )


def jest(rng: random.Random) -> Log:
    lines = []
    for i in range(rng.randint(60, 110)):
        lines.append(f" PASS  src/{_words(rng, 1)}/{_words(rng, 2)}{i}.test.ts")
        lines += [f"  ✓ handles {_words(rng, 3)} ({rng.randint(1, 40)} ms)" for _ in range(3)]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        " FAIL  src/cart/discount.test.ts",
        "  ● Cart › applies the member discount",
        "",
        "    expect(received).toBe(expected) // Object.is equality",
        "",
        "    Expected: 90",
        "    Received: 100",
        "",
        "      at Object.<anonymous> (src/cart/discount.test.ts:42:31)",
    ]
    lines += [
        "",
        "Test Suites: 1 failed, 97 passed, 98 total",
        "Tests:       1 failed, 391 passed, 392 total",
        "Snapshots:   0 total",
        "Time:        14.2 s",
    ]
    return Log(
        "jest",
        "\n".join(lines),
        ("FAIL  src/cart/discount.test.ts", "Received: 100", "Tests:       1 failed"),
    )


def maven(rng: random.Random) -> Log:
    lines = ["[INFO] Scanning for projects...", "[INFO] Building core 2.4.0-SNAPSHOT"]
    for _ in range(rng.randint(200, 300)):
        group = f"org/{_words(rng, 1)}/{_words(rng, 1)}"
        lines.append(
            f"Downloaded from central: https://repo.maven.apache.org/maven2/{group}/"
            f"{rng.randint(1, 9)}.{rng.randint(0, 20)}/x.jar ({rng.randint(2, 900)} kB at "
            f"{rng.randint(1, 9)}.{rng.randint(0, 9)} MB/s)"
        )
    lines += [
        "[INFO] --- compiler:3.11.0:compile (default-compile) @ core ---",
        "[INFO] Compiling 214 source files with javac [debug target 17] to target/classes",
        "[ERROR] COMPILATION ERROR : ",
        "[ERROR] /work/core/src/main/java/com/acme/Ledger.java:[88,24] cannot find symbol",
        "  symbol:   method balanceOf(java.lang.String)",
        "[INFO] 1 error",
        "[INFO] BUILD FAILURE",
        "[INFO] Total time:  41.512 s",
        "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.11.0:"
        "compile (default-compile) on project core: Compilation failure",
    ]
    return Log(
        "maven",
        "\n".join(lines),
        ("Ledger.java:[88,24] cannot find symbol", "BUILD FAILURE", "Failed to execute goal"),
    )


def gradle(rng: random.Random) -> Log:
    lines = []
    for i in range(rng.randint(150, 250)):
        module = _words(rng, 1)
        lines += [f"> Task :{module}:compileJava UP-TO-DATE", f"> Task :{module}:test{i} NO-SOURCE"]
    lines += [
        "> Task :app:compileKotlin FAILED",
        "e: file:///work/app/src/main/kotlin/Report.kt:57:13 Unresolved reference: totalOf",
        "",
        "FAILURE: Build failed with an exception.",
        "",
        "* What went wrong:",
        "Execution failed for task ':app:compileKotlin'.",
        "",
        "BUILD FAILED in 38s",
    ]
    return Log(
        "gradle",
        "\n".join(lines),
        ("Report.kt:57:13 Unresolved reference", "Execution failed for task", "BUILD FAILED in"),
    )


def tsc(rng: random.Random) -> Log:
    lines = [
        f"src/{_words(rng, 1)}/{_words(rng, 2)}.ts: emitted in {rng.randint(1, 90)}ms"
        for _ in range(rng.randint(250, 380))
    ]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        "src/billing/invoice.ts(112,7): error TS2322: Type 'string' is not assignable to type "
        "'number'."
    ]
    lines += ["", "Found 1 error in src/billing/invoice.ts:112"]
    return Log(
        "tsc",
        "\n".join(lines),
        ("invoice.ts(112,7): error TS2322", "Found 1 error"),
    )


def eslint(rng: random.Random) -> Log:
    lines = []
    for _ in range(rng.randint(90, 150)):
        lines += [f"/work/web/src/{_words(rng, 2)}.js"]
        lines += [
            f"  {rng.randint(1, 400)}:{rng.randint(1, 80)}  warning  Unexpected console "
            "statement  no-console"
            for _ in range(rng.randint(1, 3))
        ]
        lines.append("")
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        "/work/web/src/checkout.js",
        "  77:9  error  'total' is assigned a value but never used  no-unused-vars",
        "",
    ]
    lines += ["✖ 312 problems (1 error, 311 warnings)"]
    return Log(
        "eslint",
        "\n".join(lines),
        ("77:9  error  'total' is assigned", "✖ 312 problems (1 error"),
    )


def dotnet(rng: random.Random) -> Log:
    lines = ["  Determining projects to restore..."]
    lines += [
        f"  Restored /work/src/{_words(rng, 1)}/{_words(rng, 1)}.csproj "
        f"(in {rng.randint(1, 900)} ms)."
        for _ in range(rng.randint(200, 300))
    ]
    lines += [
        "/work/src/Api/Program.cs(31,17): error CS0103: The name 'cfg' does not exist in the "
        "current context [/work/src/Api/Api.csproj]",
        "",
        "Build FAILED.",
        "",
        "    0 Warning(s)",
        "    1 Error(s)",
    ]
    return Log(
        ".NET",
        "\n".join(lines),
        ("Program.cs(31,17): error CS0103", "Build FAILED.", "1 Error(s)"),
    )


def terraform(rng: random.Random) -> Log:
    lines = []
    for i in range(rng.randint(120, 200)):
        lines += [
            f"aws_s3_object.{_words(rng, 1)}[{i}]: Refreshing state... "
            f"[id={_words(rng, 2)}-{rng.randint(1000, 9999)}]"
        ]
    lines += [
        "",
        "Error: Unsupported attribute",
        "",
        '  on main.tf line 48, in resource "aws_lambda_function" "api":',
        "  48:   role = aws_iam_role.lambda.arnn",
        "",
        'This object has no argument, nested block, or exported attribute named "arnn".',
    ]
    return Log(
        "terraform",
        "\n".join(lines),
        ("Error: Unsupported attribute", "on main.tf line 48"),
    )


def docker_build(rng: random.Random) -> Log:
    lines = []
    for step in range(1, 12):
        lines.append(f"#{step} [build {step}/11] RUN step {step}")
        lines += [
            f"#{step} {rng.randint(1, 60)}.{rng.randint(100, 999)} npm warn deprecated "
            f"{_words(rng, 1)}@{rng.randint(1, 9)}.0.{rng.randint(0, 9)}: no longer supported"
            for _ in range(rng.randint(20, 40))
        ]
        lines.append(f"#{step} DONE {rng.randint(1, 60)}.{rng.randint(0, 9)}s")
    lines += [
        "#12 [build 11/11] RUN npm run build",
        "#12 4.211 src/main.ts:9:1 - error: Cannot find module './routes'",
        '#12 ERROR: process "/bin/sh -c npm run build" did not complete successfully: exit code: 2',
        "------",
        'ERROR: failed to solve: process "/bin/sh -c npm run build" did not complete '
        "successfully: exit code: 2",
    ]
    return Log(
        "docker build",
        "\n".join(lines),
        ("Cannot find module './routes'", "ERROR: failed to solve"),
    )


def git_merge(rng: random.Random) -> Log:
    lines = [
        f" {_words(rng, 1)}/{_words(rng, 2)}.py | {rng.randint(1, 90)} "
        f"{'+' * rng.randint(1, 30)}{'-' * rng.randint(0, 10)}"
        for _ in range(rng.randint(250, 350))
    ]
    lines[0:0] = ["Auto-merging src/billing/ledger.py"]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = ["CONFLICT (content): Merge conflict in src/billing/ledger.py"]
    lines += ["Automatic merge failed; fix conflicts and then commit the result."]
    return Log(
        "git merge",
        "\n".join(lines),
        ("CONFLICT (content): Merge conflict in src/billing/ledger.py", "Automatic merge failed"),
    )


def mocha(rng: random.Random) -> Log:
    lines = []
    for _ in range(rng.randint(40, 70)):
        lines.append(f"  {_words(rng, 2)}")
        lines += [f"    ✔ should {_words(rng, 3)} ({rng.randint(1, 30)}ms)" for _ in range(5)]
    lines += [
        "",
        "  318 passing (4s)",
        "  1 failing",
        "",
        "  1) Ledger",
        "       sums refunds:",
        "     AssertionError: expected -5 to equal 5",
        "      at Context.<anonymous> (test/ledger.spec.js:64:28)",
    ]
    return Log(
        "mocha",
        "\n".join(lines),
        ("1 failing", "AssertionError: expected -5 to equal 5", "test/ledger.spec.js:64:28"),
    )


def valgrind(rng: random.Random) -> Log:
    """`valgrind --leak-check=full ./prog`: Memcheck's report around the program's own chatter
    (the dev corpus holds one short Valgrind run, which stage 1 never had to cut)."""
    pid = rng.randint(1000, 99999)
    v = f"=={pid}=="
    lines = [
        f"{v} Memcheck, a memory error detector",
        f"{v} Copyright (C) 2002-2022, and GNU GPL'd, by Julian Seward et al.",
        f"{v} Using Valgrind-3.19.0 and LibVEX; rerun with -h for copyright info",
        f"{v} Command: ./ringbuf_bench",
        f"{v} ",
    ]
    lines += [
        f"round {i}: pushed {rng.randint(100, 999)} items, {_words(rng, 2)} ok"
        for i in range(rng.randint(150, 260))
    ]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        f"{v} Invalid write of size 4",
        f"{v}    at 0x109234: rb_push (ringbuf.c:42)",
        f"{v}    by 0x1093A1: main (bench.c:17)",
        f"{v}  Address 0x4a8b068 is 0 bytes after a block of size 40 alloc'd",
        f"{v}    at 0x48407B4: malloc (vg_replace_malloc.c:381)",
        f"{v}    by 0x1091F0: rb_new (ringbuf.c:12)",
        f"{v} ",
    ]
    lines += [
        f"{v} ",
        f"{v} HEAP SUMMARY:",
        f"{v}     in use at exit: 40 bytes in 1 blocks",
        f"{v}   total heap usage: {rng.randint(300, 900)} allocs, 299 frees, 81,064 bytes"
        " allocated",
        f"{v} ",
        f"{v} 40 bytes in 1 blocks are definitely lost in loss record 1 of 1",
        f"{v}    at 0x48407B4: malloc (vg_replace_malloc.c:381)",
        f"{v}    by 0x1091F0: rb_new (ringbuf.c:12)",
        f"{v} ",
        f"{v} LEAK SUMMARY:",
        f"{v}    definitely lost: 40 bytes in 1 blocks",
        f"{v}    indirectly lost: 0 bytes in 0 blocks",
        f"{v}      possibly lost: 0 bytes in 0 blocks",
        f"{v}    still reachable: 0 bytes in 0 blocks",
        f"{v}         suppressed: 0 bytes in 0 blocks",
        f"{v} ",
        f"{v} For lists of detected and suppressed errors, rerun with: -s",
        f"{v} ERROR SUMMARY: 2 errors from 2 contexts (suppressed: 0 from 0)",
    ]
    return Log(
        "valgrind",
        "\n".join(lines),
        (
            "Invalid write of size 4",
            "rb_push (ringbuf.c:42)",
            "definitely lost: 40 bytes in 1 blocks",
            "ERROR SUMMARY: 2 errors from 2 contexts",
        ),
    )


def unittest(rng: random.Random) -> Log:
    """`python -m unittest -v`: one test failing, one erroring among hundreds that pass."""
    lines = []
    for i in range(rng.randint(150, 260)):
        name = f"test_{_words(rng, 2)}_{i}"
        cls = f"tests.test_{_words(rng, 1)}.{_words(rng, 1).title()}Tests"
        lines.append(f"{name} ({cls}.{name}) ... " + ("ok" if rng.random() > 0.05 else "skipped"))
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        "test_add (tests.test_calc.CalcTests.test_add) ... FAIL",
        "test_div (tests.test_calc.CalcTests.test_div) ... ERROR",
    ]
    rule = "-" * 70
    lines += [
        "",
        "=" * 70,
        "ERROR: test_div (tests.test_calc.CalcTests.test_div)",
        rule,
        "Traceback (most recent call last):",
        '  File "/src/tests/test_calc.py", line 14, in test_div',
        "    self.assertEqual(div(1, 0), 0)",
        '  File "/src/calc.py", line 8, in div',
        "    return a / b",
        "           ~~^~~",
        "ZeroDivisionError: division by zero",
        "",
        "=" * 70,
        "FAIL: test_add (tests.test_calc.CalcTests.test_add)",
        rule,
        "Traceback (most recent call last):",
        '  File "/src/tests/test_calc.py", line 8, in test_add',
        "    self.assertEqual(add(2, 2), 5)",
        "AssertionError: 4 != 5",
        "",
        rule,
        f"Ran {len(lines) + 2} tests in 0.{rng.randint(100, 999)}s",
        "",
        "FAILED (failures=1, errors=1, skipped=3)",
    ]
    return Log(
        "unittest",
        "\n".join(lines),
        (
            "FAIL: test_add (tests.test_calc.CalcTests.test_add)",
            "AssertionError: 4 != 5",
            "FAILED (failures=1, errors=1, skipped=3)",
        ),
    )


def ctest(rng: random.Random) -> Log:
    """`ctest --output-on-failure`: one of hundreds of CMake tests fails."""
    names = [f"{_words(rng, 2)}_{i}" for i in range(rng.randint(120, 200))]
    failed = rng.randint(len(names) // 4, len(names) * 3 // 4)
    names[failed] = "ring_wraparound"
    total = len(names)
    lines = ["Test project /src/build"]
    for i, name in enumerate(names, 1):
        lines.append(f"      Start {i:3}: {name}")
        verdict = "***Failed" if name == "ring_wraparound" else "   Passed"
        dots = "." * max(3, 40 - len(name))
        lines.append(
            f"{i:3}/{total} Test {'#' + str(i):>4}: {name} {dots}{verdict}    0.0{i % 10} sec"
        )
        if name == "ring_wraparound":
            lines += [
                "ring_test.c:57: assertion failed: rb_read(rb, out, 4) == 4 (got 3)",
                "",
            ]
    percent = (total - 1) * 100 // total
    lines += [
        "",
        f"{percent}% tests passed, 1 tests failed out of {total}",
        "",
        "Total Test time (real) =   2.71 sec",
        "",
        "The following tests FAILED:",
        f"\t{failed + 1:3} - ring_wraparound (Failed)",
        "Errors while running CTest",
    ]
    return Log(
        "ctest",
        "\n".join(lines),
        (
            "assertion failed: rb_read(rb, out, 4) == 4 (got 3)",
            f"{percent}% tests passed, 1 tests failed out of {total}",
            "ring_wraparound (Failed)",
        ),
    )


def rspec(rng: random.Random) -> Log:
    """`rspec --format documentation`: one example of hundreds fails."""
    lines = []
    count = 0
    for _ in range(rng.randint(40, 70)):
        lines.append(_words(rng, 1).title())
        for _ in range(rng.randint(2, 5)):
            lines.append(f"  #{_words(rng, 1)}")
            for _ in range(rng.randint(1, 3)):
                lines.append(f"    {_words(rng, 3).replace('_', ' ')} correctly")
                count += 1
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = ["Ledger", "  #balance", "    sums credits and debits (FAILED - 1)"]
    count += 1
    lines += [
        "",
        "Failures:",
        "",
        "  1) Ledger#balance sums credits and debits",
        "     Failure/Error: expect(ledger.balance).to eq(5)",
        "",
        "       expected: 5",
        "            got: -5",
        "",
        "       (compared using ==)",
        "     # ./spec/ledger_spec.rb:14:in `block (3 levels) in <top (required)>'",
        "",
        f"Finished in 0.{rng.randint(1000, 9999)} seconds (files took 0.21 seconds to load)",
        f"{count} examples, 1 failure",
        "",
        "Failed examples:",
        "",
        "rspec ./spec/ledger_spec.rb:12 # Ledger#balance sums credits and debits",
    ]
    return Log(
        "rspec",
        "\n".join(lines),
        (
            "Failure/Error: expect(ledger.balance).to eq(5)",
            f"{count} examples, 1 failure",
            "rspec ./spec/ledger_spec.rb:12",
        ),
    )


def asan(rng: random.Random) -> Log:
    """A program built with `-fsanitize=address` reads past a buffer after long output."""
    pid = rng.randint(1000, 99999)
    lines = [
        f"decoded frame {i}: {rng.randint(10, 999)} bytes, {_words(rng, 2)} ok"
        for i in range(rng.randint(150, 260))
    ]
    lines += [
        "=" * 65,
        f"=={pid}==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000018 at pc "
        "0x5581c0f3a2b4 bp 0x7ffd3c6a8e30 sp 0x7ffd3c6a8e20",
        "READ of size 4 at 0x602000000018 thread T0",
        "    #0 0x5581c0f3a2b3 in parse_header /src/codec.c:88",
        "    #1 0x5581c0f3a5f1 in main /src/main.c:21",
        "    #2 0x7f3a1c229d8f in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58",
        "",
        "0x602000000018 is located 0 bytes to the right of 8-byte region "
        "[0x602000000010,0x602000000018)",
        "allocated by thread T0 here:",
        "    #0 0x7f3a1c6b4887 in __interceptor_malloc "
        "../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:145",
        "    #1 0x5581c0f3a1e9 in codec_new /src/codec.c:40",
        "",
        "SUMMARY: AddressSanitizer: heap-buffer-overflow /src/codec.c:88 in parse_header",
        "Shadow bytes around the buggy address:",
        *(f"  0x0c047fff7f{k}0: " + " ".join(["fa"] * 16) for k in "0123456789ab"),
        "Shadow byte legend (one shadow byte represents 8 application bytes):",
        "  Addressable:           00",
        "  Heap left redzone:       fa",
        f"=={pid}==ABORTING",
    ]
    return Log(
        "asan",
        "\n".join(lines),
        (
            "ERROR: AddressSanitizer: heap-buffer-overflow",
            "SUMMARY: AddressSanitizer: heap-buffer-overflow /src/codec.c:88 in parse_header",
        ),
    )


def cmake(rng: random.Random) -> Log:
    """`cmake -B build && cmake --build build`: configure chatter, then a package not found."""
    lines = ["-- The C compiler identification is GNU 12.2.0"]
    lines += [
        f"-- Looking for {_words(rng, 1)}_{_words(rng, 1)}.h - found"
        if rng.random() > 0.2
        else f"-- Performing Test HAVE_{_words(rng, 2).upper()} - Success"
        for _ in range(rng.randint(150, 260))
    ]
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        "CMake Error at cmake/deps.cmake:14 (find_package):",
        '  By not providing "FindZstd.cmake" in CMAKE_MODULE_PATH this project has',
        '  asked CMake to find a package configuration file provided by "Zstd", but',
        "  CMake did not find one.",
        "",
        "Call Stack (most recent call first):",
        "  CMakeLists.txt:9 (include)",
        "",
    ]
    lines += ["-- Configuring incomplete, errors occurred!"]
    return Log(
        "cmake",
        "\n".join(lines),
        (
            "CMake Error at cmake/deps.cmake:14 (find_package):",
            "Configuring incomplete, errors occurred!",
        ),
    )


def apt_install(rng: random.Random) -> Log:
    """`apt-get install -y ...`: the plan's summary line in the middle of a long download log."""
    packages = [f"lib{_words(rng, 1)}{i}-dev" for i in range(rng.randint(60, 110))]
    lines = [
        "Reading package lists...",
        "Building dependency tree...",
        "Reading state information...",
        "The following NEW packages will be installed:",
        "  " + " ".join(packages),
        f"0 upgraded, {len(packages)} newly installed, 0 to remove and 12 not upgraded.",
        f"Need to get {rng.randint(10, 99)}.{rng.randint(0, 9)} MB of archives.",
    ]
    lines += [
        f"Get:{i} http://deb.debian.org/debian bookworm/main amd64 {p} amd64 "
        f"{rng.randint(1, 9)}.{rng.randint(0, 20)}-{rng.randint(1, 5)} [{rng.randint(20, 900)} kB]"
        for i, p in enumerate(packages, 1)
    ]
    lines += [
        f"Setting up {p}:amd64 ({rng.randint(1, 9)}.{rng.randint(0, 20)}) ..." for p in packages
    ]
    lines.append("Processing triggers for libc-bin (2.36-9+deb12u4) ...")
    return Log(
        "apt-get",
        "\n".join(lines),
        (f"0 upgraded, {len(packages)} newly installed, 0 to remove and 12 not upgraded.",),
    )


def kubectl_pods(rng: random.Random) -> Log:
    """`kubectl get pods -o json`: one pod of hundreds is crash-looping."""

    def pod(name: str, state: dict[str, object], ready: bool, restarts: int) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": name.split("-")[0]}},
            "spec": {"nodeName": f"node-{rng.randint(1, 9)}", "containers": [{"name": "app"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "app", "ready": ready, "restartCount": restarts, "state": state}
                ],
            },
        }

    started = {"running": {"startedAt": "2026-11-30T09:12:00Z"}}
    items = [
        pod(f"{_words(rng, 1)}-{rng.randint(10000, 99999)}-{i}", started, True, 0)
        for i in range(rng.randint(120, 200))
    ]
    crashing = {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 5m0s restarting failed container=app pod=billing-api-7d9f8-x2x9z",
        }
    }
    items.insert(
        rng.randint(len(items) // 4, len(items) * 3 // 4),
        pod("billing-api-7d9f8-x2x9z", crashing, False, 14),
    )
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=4)
    return Log(
        "kubectl pods",
        text,
        ('"name": "billing-api-7d9f8-x2x9z"', '"reason": "CrashLoopBackOff"'),
        "json",
    )


def gh_runs(rng: random.Random) -> Log:
    """`gh run list --json ...`: one run of hundreds failed."""
    runs = [
        {
            "databaseId": 9_000_000 + i,
            "displayTitle": f"Update {_words(rng, 2)}",
            "headBranch": f"feature/{_words(rng, 2)}",
            "status": "completed",
            "conclusion": "success",
            "createdAt": f"2026-11-{rng.randint(1, 29):02d}T{rng.randint(0, 23):02d}:00:00Z",
        }
        for i in range(rng.randint(150, 250))
    ]
    failed = dict(
        runs[0], databaseId=9_123_456, headBranch="fix/ledger-rounding", conclusion="failure"
    )
    runs.insert(rng.randint(len(runs) // 4, len(runs) * 3 // 4), failed)
    return Log(
        "gh run list",
        json.dumps(runs, indent=2),
        ('"databaseId": 9123456', '"headBranch": "fix/ledger-rounding"'),
        "json",
    )


GENERATORS: tuple[Callable[[random.Random], Log], ...] = (
    go_test,
    cargo_build,
    jest,
    mocha,
    maven,
    gradle,
    tsc,
    eslint,
    dotnet,
    terraform,
    docker_build,
    git_merge,
    valgrind,
    unittest,
    ctest,
    rspec,
    asan,
    cmake,
    apt_install,
    kubectl_pods,
    gh_runs,
)


def logs(seed: int) -> list[Log]:
    return [make(random.Random(f"{seed}:{make.__name__}")) for make in GENERATORS]
