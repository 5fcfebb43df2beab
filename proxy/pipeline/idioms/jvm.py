"""JVM and .NET: Maven, Gradle, Kotlin, dotnet test, MSBuild."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "jvm.build.verdict",
        # Maven prints its verdict behind a log level: `[INFO] BUILD FAILURE`.
        r"(?:\[[A-Z]+\] )?BUILD (?:SUCCESS(?:FUL)?|FAILURE|FAILED)\b",
        SUMMARY,
        "outcomes",
        examples=("[INFO] BUILD FAILURE", "BUILD SUCCESSFUL in 12s"),
        why="Maven's, Gradle's and Ant's verdict",
    ),
    Idiom(
        "jvm.msbuild.verdict",
        r"Build (?:succeeded|FAILED|failed)(?:\.| with \d+ \w+\(s\).*| in [\d.]+s)?$",
        SUMMARY,
        "outcomes",
        examples=("Build FAILED.", "Build succeeded with 2 warning(s) in 3.1s"),
        counter=("Build failed because the cache was cold",),
    ),
    Idiom(
        "jvm.msbuild.errors",
        r"\d+ Error\(s\)$",
        SUMMARY,
        "outcomes",
        examples=("    2 Error(s)",),
    ),
    Idiom(
        "jvm.msbuild.warnings",
        r"\d+ Warning\(s\)$",
        SUMMARY,
        examples=("    0 Warning(s)",),
        why="a count of warnings is no verdict: the count of errors under it is",
    ),
    Idiom(
        "jvm.dotnet.test",
        r"(?:Failed|Passed)! +- Failed: +\d",
        SUMMARY,
        "outcomes",
        examples=("Failed!  - Failed:     1, Passed:    41, Skipped:     0, Total:    42",),
    ),
    Idiom(
        "jvm.kotlin.error",
        r"e: (?:file:/|/)",
        STRONG,
        "errors",
        examples=("e: file:///src/Main.kt:3:5 Unresolved reference: foo",),
        counter=("e: 5",),
        why="Kotlin's compiler diagnostics: `e:` and a path",
    ),
    Idiom(
        "jvm.gradle.task_failed",
        r"> Task :\S+ FAILED\b",
        STRONG,
        "errors",
        examples=("> Task :app:compileKotlin FAILED",),
    ),
    Idiom(
        "jvm.gradle.execution_failed",
        r"Execution failed for \S",
        STRONG,
        "errors",
        examples=("Execution failed for task ':app:compileKotlin'.",),
    ),
)
