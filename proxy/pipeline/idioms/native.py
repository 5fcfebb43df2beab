"""Native code: gcc and clang, the linker, make, CMake, Ninja, CTest, Valgrind, the sanitizers."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "native.compiler.generated",
        r"\d+ (?:errors?|warnings?) generated\b",
        SUMMARY,
        examples=("2 errors generated.", "1 warning generated."),
        why="clang's count of what it reported; the build's verdict (make's) comes after it",
    ),
    Idiom(
        "native.gcc.required_from_here",
        # g++'s template backtrace ends at the user's own line that set it off.
        r"[^\s:]++:\d+:\d+:[ \t]+required from here$",
        MEDIUM,
        examples=("src/main.cpp:12:20:   required from here",),
        why="the context of a template error, not an error",
    ),
    Idiom(
        "native.linker.undefined",
        r"\bundefined reference to\b",
        STRONG,
        "errors",
        at="anywhere",
        examples=("/usr/bin/ld: main.o: in function `main': undefined reference to `rb_push'",),
    ),
    Idiom(
        "native.segfault",
        r"segmentation fault|core dumped",
        STRONG,
        "errors",
        at="anywhere",
        examples=("Segmentation fault (core dumped)", "Aborted (core dumped)"),
    ),
    Idiom(
        "native.make.error",
        r"make(?:\[\d+\])?: \*\*\*",
        STRONG,
        "errors",
        examples=("make[1]: *** [Makefile:12: ringbuf.o] Error 1",),
    ),
    Idiom(
        "native.cmake.error", r"CMake Error\b", STRONG, "errors", examples=("CMake Error at x:3",)
    ),
    Idiom(
        "native.cmake.incomplete",
        r"-- Configuring incomplete\b",
        SUMMARY,
        "outcomes",
        examples=("-- Configuring incomplete, errors occurred!",),
    ),
    Idiom(
        "native.cmake.done",
        r"-- Configuring done\b",
        SUMMARY,
        examples=("-- Configuring done (0.1s)",),
        why="the configure step went well: the build after it says how the run ended",
    ),
    Idiom(
        "native.ninja.stopped",
        r"ninja: build stopped\b",
        SUMMARY,
        "outcomes",
        examples=("ninja: build stopped: subcommand failed.",),
    ),
    Idiom(
        "native.ctest.passed",
        # CTest's pass rate.
        r"\d+% tests passed\b",
        SUMMARY,
        "outcomes",
        examples=("92% tests passed, 1 tests failed out of 12",),
    ),
    Idiom(
        "native.ctest.failed",
        r"\d+/\d+ Test +#\d+: \S+ .*\*\*\*\w|\d+ - \S+ \((?:Failed|Timeout|Not Run|Exception"
        r"|SEGFAULT|Child aborted|OTHER_FAULT)\)$",
        STRONG,
        "errors",
        examples=(
            " 7/12 Test  #7: ringbuf_wrap .....................***Failed    0.01 sec",
            "  7 - ringbuf_wrap (Failed)",
        ),
        counter=(" 6/12 Test  #6: ringbuf_push .....................   Passed    0.01 sec",),
        why="CTest's failed test, and the list of them at the end",
    ),
    Idiom(
        "native.valgrind.memcheck",
        # Memcheck's error kinds (Valgrind manual, "Explanation of error messages from Memcheck").
        r"Invalid (?:read|write|free|realloc)\b|Mismatched (?:free|delete)|Conditional jump or move"
        r"|Use of uninitialised value|Syscall param \S+ points to|Source and destination overlap"
        r"|[\d,]+ bytes in [\d,]+ blocks are (?:definitely|possibly) lost|Process terminating with",
        STRONG,
        "errors",
        examples=(
            "==6498== Invalid read of size 4",
            "==6498== 40 bytes in 1 blocks are definitely lost in loss record 1 of 1",
        ),
        counter=("==6498== 40 bytes in 1 blocks are still reachable in loss record 1 of 1",),
    ),
    Idiom(
        "native.valgrind.summary",
        r"\b(?:definitely|indirectly|possibly) lost:|in use at exit:|heap usage:"
        r"|\bsummary:|\b(?:error|leak|heap) summary\b",
        SUMMARY,
        at="anywhere",
        examples=("==6498==     in use at exit: 40 bytes in 1 blocks",),
        why="every line of Valgrind's summaries ranks; the facts take its verdict and the leaks "
        "it found (native.valgrind.verdict)",
    ),
    Idiom(
        "native.valgrind.verdict",
        r"ERROR SUMMARY: \d+ errors? from \d+ contexts?\b|(?:definitely|possibly) lost: [1-9]",
        SUMMARY,
        "outcomes",
        examples=(
            "==6498== ERROR SUMMARY: 2 errors from 2 contexts (suppressed: 0 from 0)",
            "==6498==    definitely lost: 40 bytes in 1 blocks",
        ),
        counter=("==6498==    definitely lost: 0 bytes in 0 blocks",),
    ),
    Idiom(
        "native.sanitizer.summary",
        r"SUMMARY: \w*Sanitizer: \S",
        SUMMARY,
        "outcomes",
        examples=("SUMMARY: AddressSanitizer: heap-buffer-overflow ringbuf.c:42 in rb_push",),
    ),
    Idiom(
        "native.sanitizer.error",
        r"(?:Direct|Indirect) leak of \d|WARNING: \w*Sanitizer: ",
        STRONG,
        "errors",
        examples=(
            "Direct leak of 40 byte(s) in 1 object(s) allocated from:",
            "WARNING: ThreadSanitizer: data race (pid=7)",
        ),
        why="LeakSanitizer's leaks, ThreadSanitizer's warnings",
    ),
)
