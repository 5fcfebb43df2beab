"""JVM and .NET: Maven, Gradle, Kotlin, dotnet test, MSBuild."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "jvm.build.verdict",
        # Maven prints its verdict behind a log level: `[INFO] BUILD FAILURE`.
        r"(?:\[[A-Z]+\] )?(?:BUILD|Build) (?:SUCCESS(?:FUL)?|FAILURE|FAILED|succeeded|failed)\b",
        SUMMARY,
        examples=("[INFO] BUILD FAILURE", "BUILD SUCCESSFUL in 12s", "Build succeeded."),
    ),
    Idiom(
        "jvm.build.verdict.fact",
        r"(?:\[INFO\] )?BUILD (?:SUCCESS(?:FUL)?|FAILURE|FAILED)\b",
        fact="outcomes",
        examples=("[INFO] BUILD FAILURE",),
    ),
    Idiom(
        "jvm.msbuild.verdict.fact",
        r"Build (?:succeeded|FAILED|failed)(?:\.| with \d+ \w+\(s\).*| in [\d.]+s)?$",
        fact="outcomes",
        examples=("Build FAILED.", "Build succeeded with 2 warning(s) in 3.1s"),
    ),
    Idiom(
        "jvm.msbuild.totals",
        r"\d+ (?:Error|Warning)\(s\)",
        SUMMARY,
        examples=("    2 Error(s)",),
    ),
    Idiom("jvm.msbuild.errors.fact", r"\d+ Error\(s\)$", fact="outcomes", examples=("2 Error(s)",)),
    Idiom(
        "jvm.dotnet.test.fact",
        r"(?:Failed|Passed)! +- Failed: +\d",
        fact="outcomes",
        examples=("Failed!  - Failed:     1, Passed:    41, Skipped:     0, Total:    42",),
    ),
    Idiom("jvm.log.error", r"\[(?:ERROR|FATAL|SEVERE)\]", STRONG, examples=("[ERROR] x",)),
    Idiom(
        "jvm.kotlin.error",
        r"e: (?:file:/|/)",
        STRONG,
        examples=("e: file:///src/Main.kt:3:5 Unresolved reference: foo",),
    ),
    Idiom(
        "jvm.kotlin.error.fact",
        r"e: \S|Execution failed for \S",
        fact="errors",
        examples=("e: /src/Main.kt: (3, 5): Unresolved reference", "Execution failed for task"),
    ),
    Idiom(
        "jvm.gradle.task_failed",
        r"> Task :\S+ FAILED\b",
        STRONG,
        examples=("> Task :app:compileKotlin FAILED",),
    ),
    Idiom(
        "jvm.gradle.execution_failed",
        r"Execution failed for task\b",
        STRONG,
        examples=("Execution failed for task ':app:compileKotlin'.",),
    ),
)
