"""Native code: gcc and clang, the linker, make, CMake, Ninja, CTest, Valgrind, the sanitizers."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

# Memcheck's error kinds (Valgrind manual, "Explanation of error messages from Memcheck").
_MEMCHECK = (
    r"Invalid (?:read|write) of size \d|Invalid (?:free|realloc)\(\)|Mismatched (?:free|delete)"
    r"|Conditional jump or move depends on uninitialised|Use of uninitialised value"
    r"|Syscall param \S+ points to uninitialised|Source and destination overlap in"
    r"|[\d,]+ bytes in [\d,]+ blocks are (?:definitely|possibly) lost"
    r"|Process terminating with default action"
)

IDIOMS = (
    Idiom(
        "native.make.error",
        r"make(?:\[\d+\])?: \*\*\*",
        STRONG,
        fact=None,
        examples=("make[1]: *** [Makefile:12: ringbuf.o] Error 1",),
    ),
    Idiom(
        "native.make.error.fact",
        r"make(?:\[\d+\])?: \*\*\*",
        fact="errors",
        examples=("make: *** [all] Error 2",),
    ),
    Idiom("native.cmake.error", r"CMake Error\b", STRONG, examples=("CMake Error at x.cmake:3",)),
    Idiom("native.cmake.error.fact", r"CMake Error\b", fact="errors", examples=("CMake Error",)),
    Idiom(
        "native.cmake.configuring",
        r"-- Configuring (?:done|incomplete)\b",
        SUMMARY,
        examples=("-- Configuring incomplete, errors occurred!",),
    ),
    Idiom(
        "native.cmake.incomplete.fact",
        r"-- Configuring incomplete, errors occurred!|ninja: build stopped: ",
        fact="outcomes",
        examples=("-- Configuring incomplete, errors occurred!", "ninja: build stopped: x"),
    ),
    Idiom(
        "native.ninja.stopped",
        r"ninja: build stopped\b",
        STRONG,
        examples=("ninja: build stopped: subcommand failed.",),
    ),
    Idiom(
        "native.ctest.passed",
        # CTest's pass rate.
        r"\d+% tests passed\b",
        SUMMARY,
        examples=("92% tests passed, 1 tests failed out of 12",),
    ),
    Idiom(
        "native.ctest.passed.fact",
        r"\d+% tests passed, \d+ tests? failed out of \d+",
        fact="outcomes",
        examples=("92% tests passed, 1 tests failed out of 12",),
    ),
    Idiom(
        "native.ctest.failed.fact",
        r"\d+/\d+ Test +#\d+: \S+ .*\*\*\*\w|\d+ - \S+ \((?:Failed|Timeout|Not Run|Exception"
        r"|SEGFAULT|Child aborted|OTHER_FAULT)\)$",
        fact="errors",
        examples=(
            " 7/12 Test  #7: ringbuf_wrap .....................***Failed    0.01 sec",
            "  7 - ringbuf_wrap (Failed)",
        ),
    ),
    Idiom(
        "native.valgrind.memcheck",
        r"Invalid (?:read|write|free|realloc)\b|Mismatched (?:free|delete)|Conditional jump or move"
        r"|Use of uninitialised value|Syscall param \S+ points to|Source and destination overlap"
        r"|[\d,]+ bytes in [\d,]+ blocks are (?:definitely|possibly) lost|Process terminating with",
        STRONG,
        examples=("==6498== Invalid read of size 4",),
    ),
    Idiom(
        "native.valgrind.memcheck.fact",
        _MEMCHECK,
        fact="errors",
        examples=("==6498== Invalid read of size 4",),
    ),
    Idiom(
        "native.valgrind.summary",
        r"\b(?:definitely|indirectly|possibly) lost:|in use at exit:|heap usage:"
        r"|\bsummary:|\b(?:error|leak|heap) summary\b",
        SUMMARY,
        at="anywhere",
        triggers=(" lost:", "in use at exit:", "heap usage:", "summary"),
        examples=("==6498== ERROR SUMMARY: 2 errors from 2 contexts (suppressed: 0 from 0)",),
    ),
    Idiom(
        "native.valgrind.summary.fact",
        r"ERROR SUMMARY: \d+ errors? from \d+ contexts?\b|(?:definitely|possibly) lost: [1-9]",
        fact="outcomes",
        examples=("ERROR SUMMARY: 2 errors from 2 contexts (suppressed: 0 from 0)",),
        why="Valgrind's verdict, and its leak summary's lines when it found a leak",
    ),
    Idiom(
        "native.sanitizer.summary.fact",
        r"SUMMARY: \w*Sanitizer: \S",
        fact="outcomes",
        examples=("SUMMARY: AddressSanitizer: heap-buffer-overflow ringbuf.c:42 in rb_push",),
    ),
    Idiom(
        "native.sanitizer.error.fact",
        r"(?:Direct|Indirect) leak of \d|WARNING: \w*Sanitizer: ",
        fact="errors",
        examples=("Direct leak of 40 byte(s) in 1 object(s) allocated from:",),
    ),
    Idiom(
        "native.compiler.error",
        # A location, then the word error: gcc/clang `f.c:3:5: error`, tsc and MSBuild
        # `f.ts(3,5): error TS2322`, ESLint's `  3:5  error  message  rule`.
        r"(?::\d+(?::\d+)?:|\(\d+(?:,\d+)?\):|^[ \t]*\d+:\d+)[ \t]*(?:fatal error|error)\b",
        STRONG,
        at="anywhere",
        triggers=("error",),
        examples=("ringbuf.c:42:5: error: 'cap' undeclared",),
    ),
    Idiom(
        "native.compiler.generated",
        r"\bcollected \d+ items?\b|\b\d+ (?:vulnerabilit|files? changed|"
        r"upgraded, \d+ newly installed|errors? generated|warnings? generated)",
        SUMMARY,
        at="anywhere",
        triggers=("collected ", "vulnerabilit", " changed", "newly installed", " generated"),
        examples=("2 errors generated.", "collected 120 items", "3 files changed, 5 insertions"),
        why="totals of pytest, npm audit, git, apt and clang",
    ),
)
