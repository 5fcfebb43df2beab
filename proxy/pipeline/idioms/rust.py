"""Rust: cargo build and test, panics."""

from __future__ import annotations

from proxy.pipeline.idioms.record import SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "rust.cargo.finished",
        r"Finished\b",
        SUMMARY,
        examples=("    Finished `dev` profile [unoptimized + debuginfo] target(s) in 2.31s",),
    ),
    Idiom(
        "rust.cargo.test_result.fact",
        r"test result: (?:ok|FAILED)\.",
        fact="outcomes",
        examples=("test result: FAILED. 10 passed; 1 failed; 0 ignored",),
    ),
    Idiom(
        "rust.panic.fact",
        r"\bpanicked at\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("thread 'main' panicked at src/main.rs:4:5:",),
    ),
)
