"""Rust: cargo build and test, panics, assertions."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "rust.cargo.finished",
        r"Finished\b",
        SUMMARY,
        examples=("    Finished `dev` profile [unoptimized + debuginfo] target(s) in 2.31s",),
        why="cargo's closing status: the facts take a closing line like it as the result's "
        "status (outcomes.status_line)",
    ),
    Idiom(
        "rust.cargo.test_result",
        r"test result: (?:ok|FAILED)\.",
        SUMMARY,
        "outcomes",
        examples=("test result: FAILED. 10 passed; 1 failed; 0 ignored",),
    ),
    Idiom(
        "rust.panic",
        r"\bpanicked at\b",
        STRONG,
        "errors",
        at="anywhere",
        examples=("thread 'main' panicked at src/main.rs:4:5:",),
    ),
    Idiom(
        "rust.assert.sides",
        r"(?:left|right): ",
        MEDIUM,
        examples=("  left: 3", " right: 4"),
        why="assert_eq!'s two values, under the panic line that is the fact",
    ),
)
