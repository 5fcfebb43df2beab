"""Go: go test, go build and vet, panics."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "go.test.package_failed",
        r"FAIL[^\S\n]+\S+[^\S\n]+(?:\d+(?:\.\d+)?s|\[[\w ]+\])",
        SUMMARY,
        "outcomes",
        examples=("FAIL\tgithub.com/acme/codec\t0.412s", "FAIL\tgithub.com/acme/x [build failed]"),
        why="go test's verdict per package (`go help test`)",
    ),
    Idiom(
        "go.test.package_ok",
        r"ok[^\S\n]+\S+[^\S\n]+(?:\d+(?:\.\d+)?s|\(cached\))",
        SUMMARY,
        "successes",
        examples=("ok  \tgithub.com/acme/bits\t0.031s", "ok  \tgithub.com/acme/bits\t(cached)"),
        counter=("ok then",),
    ),
    Idiom(
        "go.test.fail",
        r"--- FAIL: ",
        STRONG,
        "errors",
        examples=("--- FAIL: TestDecodeHeader (0.01s)",),
        counter=("--- PASS: TestDecodeHeader (0.01s)",),
        why="go help testflag: a failed test (its message, on the line next to it, is listed "
        "with it)",
    ),
    Idiom(
        "go.panic",
        r"panic: ",
        STRONG,
        "errors",
        examples=(
            "panic: runtime error: index out of range [3] with length 3",
            "panic: assignment to entry in nil map",
        ),
    ),
    Idiom(
        "go.build.error",
        r"\S*\.go:\d+:\d+: \S",
        STRONG,
        "errors",
        examples=("./main.go:12:5: undefined: foo",),
        why="go build's and go vet's diagnostics say no error word",
    ),
    Idiom(
        "go.test.want",
        # Go's test failure idiom (`Total() = 1550, want 1395`, `got 3, want 4`): a t.Errorf line
        # says no error word.
        r", want \S",
        MEDIUM,
        at="anywhere",
        examples=("    codec_test.go:118: got 3, want 4",),
        why="the facts list it with the `--- FAIL:` line next to it (outcomes' go details)",
    ),
)
