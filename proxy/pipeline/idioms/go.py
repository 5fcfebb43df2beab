"""Go: go test, go build and vet, panics."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "go.test.package",
        # Per-package verdicts.
        r"(?:ok|FAIL)[ \t]+\S+[ \t]+(?:[\d.]+s|\(cached\))[ \t]*$",
        SUMMARY,
        examples=("FAIL\tgithub.com/acme/codec\t0.412s", "ok  \tgithub.com/acme/bits\t(cached)"),
    ),
    Idiom(
        "go.test.package_failed.fact",
        r"FAIL\s+\S+\s+(?:\d+(?:\.\d+)?s|\[[\w ]+\])",
        fact="outcomes",
        examples=("FAIL\tgithub.com/acme/codec\t0.412s", "FAIL\tgithub.com/acme/x [build failed]"),
    ),
    Idiom(
        "go.test.package_ok.fact",
        r"ok\s+\S+\s+(?:\d+(?:\.\d+)?s|\(cached\))",
        fact="successes",
        examples=("ok  \tgithub.com/acme/bits\t0.031s",),
    ),
    Idiom("go.test.fail", r"--- FAIL:", STRONG, examples=("--- FAIL: TestDecodeHeader (0.01s)",)),
    Idiom(
        "go.test.fail.fact",
        r"--- FAIL: |FAIL\s+\S",
        fact="errors",
        examples=("--- FAIL: TestDecodeHeader (0.01s)", "FAIL  src/math.test.js"),
        why="go test's failed test and package; Jest's failed suite",
    ),
    Idiom("go.panic", r"panic:", STRONG, examples=("panic: runtime error: index out of range",)),
    Idiom("go.panic.fact", r"panic: ", fact="errors", examples=("panic: runtime error",)),
    Idiom(
        "go.build.error.fact",
        r"\S*\.go:\d+:\d+: \S",
        fact="errors",
        examples=("./main.go:12:5: undefined: foo",),
        why="go build and go vet",
    ),
    Idiom(
        "go.test.want",
        # Go's test failure idiom (`Total() = 1550, want 1395`, `got 3, want 4`): a t.Errorf line
        # says no error word.
        r", want \S",
        MEDIUM,
        at="anywhere",
        triggers=(", want ",),
        examples=("    codec_test.go:118: got 3, want 4",),
    ),
)
