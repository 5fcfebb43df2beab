"""Long tool outputs from toolchains the dev corpus does not hold, each with the lines a model
must still see after stage 1 (its "needles"): Go, Rust, Jest, Mocha, Maven, Gradle, TypeScript,
ESLint, .NET, Terraform, Docker, git, Valgrind, unittest, CTest, RSpec, AddressSanitizer, CMake,
apt; and two JSON listings (Kubernetes pods, CI runs) where one item of hundreds reports the
failure.

The dev corpus is mostly Python and npm; the rules of `scoring` are meant for the shapes build and
test tools share, not for those two. These logs check that on outputs written the way each tool
writes them: long passing chatter (varied by a seed) with the failure, its location and the verdict
somewhere in the middle or at the end. They are written from the tools' documented formats, not
tuned to any rule. The native-code and system tools, unittest and RSpec are in ecosystems_native.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from tests.pipeline.ecosystem_log import Log
from tests.pipeline.ecosystem_log import words as _words
from tests.pipeline.ecosystems_native import (
    apt_install,
    asan,
    cmake,
    ctest,
    docker_ps,
    kubectl_table,
    rspec,
    ruff_check,
    ruff_full,
    service_log,
    unittest,
    valgrind,
)


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
        "[ERROR] /home/core/src/main/java/com/acme/Ledger.java:[88,24] cannot find symbol",
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
        "e: file:///home/app/src/main/kotlin/Report.kt:57:13 Unresolved reference: totalOf",
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
        lines += [f"/home/web/src/{_words(rng, 2)}.js"]
        lines += [
            f"  {rng.randint(1, 400)}:{rng.randint(1, 80)}  warning  Unexpected console "
            "statement  no-console"
            for _ in range(rng.randint(1, 3))
        ]
        lines.append("")
    at = rng.randint(len(lines) // 4, len(lines) * 3 // 4)
    lines[at:at] = [
        "/home/web/src/checkout.js",
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
        f"  Restored /home/src/{_words(rng, 1)}/{_words(rng, 1)}.csproj "
        f"(in {rng.randint(1, 900)} ms)."
        for _ in range(rng.randint(200, 300))
    ]
    lines += [
        "/home/src/Api/Program.cs(31,17): error CS0103: The name 'cfg' does not exist in the "
        "current context [/home/src/Api/Api.csproj]",
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
    kubectl_table,
    docker_ps,
    ruff_check,
    ruff_full,
    service_log,
)


def logs(seed: int) -> list[Log]:
    return [make(random.Random(f"{seed}:{make.__name__}")) for make in GENERATORS]
