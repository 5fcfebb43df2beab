"""More generated tool logs (see ecosystems.py): native code and system tools, Python's
unittest, RSpec; written from each tool's documented output format."""

from __future__ import annotations

import random

from tests.pipeline.ecosystem_log import Log
from tests.pipeline.ecosystem_log import words as _words


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
    report = [
        f"{v} Invalid write of size 4",
        f"{v}    at 0x109234: rb_push (ringbuf.c:42)",
        f"{v}    by 0x1093A1: main (bench.c:17)",
        f"{v}  Address 0x4a8b068 is 0 bytes after a block of size 40 alloc'd",
        f"{v}    at 0x48407B4: malloc (vg_replace_malloc.c:381)",
        f"{v}    by 0x1091F0: rb_new (ringbuf.c:12)",
        f"{v} ",
    ]
    if rng.random() < 0.5:
        # The program's stdout is a pipe, flushed in blocks; Valgrind writes to stderr at once:
        # the report's first line lands glued to half a line of the program's own output.
        line = lines.pop(at - 1)
        cut = rng.randint(3, len(line) - 2)
        report = [line[:cut] + report[0], *report[1:], line[cut:]]
        at -= 1
    lines[at:at] = report
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


def kubectl_table(rng: random.Random) -> Log:
    """`kubectl get pods`: one pod of hundreds is crash-looping (the table, not `-o json`)."""
    rows = ["NAME                                 READY   STATUS             RESTARTS       AGE"]
    for i in range(rng.randint(150, 260)):
        name = f"{_words(rng, 1)}-{rng.randint(10000, 99999)}-{i}"
        rows.append(f"{name:<36} 1/1     Running            0              {rng.randint(1, 60)}d")
    bad = f"billing-api-{rng.randint(10000, 99999)}-x2x9z"
    at = rng.randint(len(rows) // 4, len(rows) * 3 // 4)
    rows.insert(at, f"{bad:<36} 0/1     CrashLoopBackOff   14 (3m ago)    2d")
    return Log("kubectl table", "\n".join(rows), (bad, "CrashLoopBackOff"))


def docker_ps(rng: random.Random) -> Log:
    """`docker ps -a`: one container of hundreds was killed (137); others exited cleanly."""
    rows = ["CONTAINER ID   IMAGE              STATUS                      NAMES"]
    for i in range(rng.randint(120, 220)):
        state = "Exited (0) 2 days ago" if rng.random() < 0.1 else f"Up {rng.randint(2, 9)} days"
        rows.append(f"{rng.randrange(16**12):012x}   {_words(rng, 1)}:1.{i:<8} {state:<27} app_{i}")
    at = rng.randint(len(rows) // 4, len(rows) * 3 // 4)
    name = f"{_words(rng, 1)}_worker_{rng.randint(10, 99)}"
    rows.insert(
        at, f"{rng.randrange(16**12):012x}   worker:2.4         Exited (137) 3 hours ago    {name}"
    )
    return Log("docker ps", "\n".join(rows), (name, "Exited (137)"))


def ruff_check(rng: random.Random) -> Log:
    """`ruff check --output-format concise`: every line a diagnostic, then the count."""
    codes = ["F401", "E501", "UP006", "B008", "SIM108", "PLR0913"]
    lines = [
        f"src/{_words(rng, 1)}/{_words(rng, 1)}.py:{rng.randint(1, 900)}:{rng.randint(1, 80)}: "
        f"{rng.choice(codes)} {_words(rng, 3).replace('_', ' ')} is not allowed here"
        for _ in range(rng.randint(150, 260))
    ]
    verdict = f"Found {len(lines)} errors."
    lines += [verdict, "[*] 12 fixable with the `--fix` option."]
    return Log("ruff", "\n".join(lines), (lines[0], verdict))


def ruff_full(rng: random.Random) -> Log:
    """`ruff check` in its default format: each diagnostic is its code and message, a `-->`
    location and the source quoted behind a numbered gutter. The quoted code says "error",
    "exit" and "invalid" (it handles errors); the one real bug among the style nits (an
    undefined name) says none of them."""
    nits = [
        ("D401", "First line of docstring should be in imperative mood"),
        ("E501", "Line too long (104 > 88)"),
        ("ANN001", "Missing type annotation for function argument `handler`"),
        ("PTH118", "`os.path.join()` should be replaced by `Path` with `/` operator"),
        ("COM812 [*]", "Trailing comma missing"),
    ]
    quoted = [
        "raise ValueError(f'invalid {name}: {error}')",
        "except OSError as error:",
        "sys.exit(2)  # exit code for a usage error",
        "log.warning('retry failed, giving up')",
        "return errors",
    ]

    def diagnostic(code: str, message: str) -> list[str]:
        path = f"src/{_words(rng, 1)}/{_words(rng, 1)}.py"
        line = rng.randint(10, 900)
        column = rng.randint(1, 40)
        return [
            f"{code} {message}",
            f"   --> {path}:{line}:{column}",
            "    |",
            f"{line - 1:<3} |     {rng.choice(quoted)}",
            f"{line:<3} |     {rng.choice(quoted)}",
            "    |     ^^^^^^^^^^^",
            f"{line + 1:<3} |     {rng.choice(quoted)}",
            "    |",
            "",
        ]

    lines: list[str] = []
    count = rng.randint(150, 260)
    for _ in range(count):
        lines += diagnostic(*rng.choice(nits))
    bug = f"F821 Undefined name `{_words(rng, 2)}_limit`"
    at = rng.randint(count // 4, count * 3 // 4) * 9
    lines[at:at] = diagnostic(*bug.split(" ", 1))
    verdict = f"Found {count + 1} errors."
    lines += [verdict, "[*] 31 fixable with the `--fix` option.", "[exit code: 1]"]
    return Log("ruff (full)", "\n".join(lines), (bug, verdict))


def service_log(rng: random.Random) -> Log:
    """A service's own log (Python's logging, `logger.exception`): INFO chatter and distinct
    WARN lines that say "failed" and "timed out" too, around one ERROR and its traceback."""

    def stamp(i: int) -> str:
        return f"2026-11-30 09:{i // 60 % 60:02d}:{i % 60:02d},{rng.randint(100, 999)}"

    lines = [
        f"{stamp(i)} INFO app.sync: tenant {rng.randint(1, 400)} synced {rng.randint(1, 900)} rows"
        for i in range(rng.randint(400, 700))
    ]
    for k in range(rng.randint(12, 20)):
        i = rng.randrange(len(lines))
        words = " ".join(_words(rng, 1) for _ in range(k % 6 + 1))
        lines[i] = f"{stamp(i)} WARN app.sync: {words} retry failed after timed out call #{k}"
    tenant = rng.randint(1, 400)
    error = f"{stamp(0)} ERROR app.sync: sync of tenant {tenant} failed"
    exception = f"ConnectionError: db-primary:5432 refused the connection (tenant {tenant})"
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        error,
        "Traceback (most recent call last):",
        '  File "/srv/app/sync.py", line 88, in run',
        "    rows = fetch(tenant)",
        '  File "/srv/app/db.py", line 31, in fetch',
        "    raise ConnectionError(f'db-primary:5432 refused the connection (tenant {tenant})')",
        exception,
    ]
    return Log("service log", "\n".join(lines), (error, exception))
