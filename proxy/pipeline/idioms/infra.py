"""Infrastructure: Terraform, Docker, Kubernetes, apt, GitHub Actions."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "infra.terraform.plan",
        r"Plan: \d+ to add\b",
        SUMMARY,
        examples=("Plan: 3 to add, 1 to change, 0 to destroy.",),
    ),
    Idiom(
        "infra.terraform.complete",
        r"(?:Apply|Destroy) complete!",
        SUMMARY,
        examples=("Apply complete! Resources: 3 added, 0 changed, 0 destroyed.",),
    ),
    Idiom("infra.apt.error", r"E: ", STRONG, examples=("E: Unable to locate package foo",)),
    Idiom("infra.apt.error.fact", r"E: ", fact="errors", examples=("E: Unable to locate package",)),
    Idiom(
        "infra.apt.upgraded.fact",
        r"\d+ upgraded, \d+ newly installed\b",
        fact="successes",
        examples=("0 upgraded, 3 newly installed, 0 to remove and 12 not upgraded.",),
    ),
    Idiom(
        "infra.docker.daemon.fact",
        r"\bFailed (?:to \w|asserting that\b)|\bError response from daemon\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("Error response from daemon: No such container: web",),
        why="Docker's daemon errors, many tools' `Failed to ...`, PHPUnit's `Failed asserting`",
    ),
    Idiom(
        "infra.states",
        # A row of a status table whose state is a failure: `kubectl get pods` (CrashLoopBackOff,
        # ImagePullBackOff, ErrImagePull, OOMKilled, Evicted), `kubectl get nodes` (NotReady),
        # `docker ps` (Exited with a non-zero code, unhealthy). One such row among hundreds of
        # Running ones is what the listing was run for.
        r"backoff\b|errimagepull|oomkilled|\bevicted\b|\bnotready\b|\bunhealthy\b"
        r"|\bexited \((?!0\))\d+\)",
        MEDIUM,
        at="anywhere",
        triggers=(
            "backoff",  # CrashLoopBackOff, ImagePullBackOff
            "errimagepull",
            "oomkilled",
            "evicted",
            "notready",
            "unhealthy",
            "exited (",
        ),
        examples=("api-7d4b9c6f5-x2x9q   0/1   CrashLoopBackOff   7   12m",),
    ),
    Idiom(
        "infra.states.fact",
        r"\b\w*BackOff\b|\bCrashLoop|\bErrImagePull\b|\bOOMKilled\b|\bEvicted\b|\bNotReady\b"
        r"|\bExited \([1-9]\d*\)",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("api-7d4b9c6f5-x2x9q   0/1   CrashLoopBackOff   7   12m",),
    ),
    Idiom(
        "infra.github.annotation",
        # GitHub Actions' error annotations (`gh run view --log-failed`): `##[error]` and the
        # `::error file=...::` workflow command, behind the job, step and timestamp columns.
        r"##\[error\]|::error\b",
        STRONG,
        at="anywhere",
        triggers=("##[error]", "::error"),
        examples=("build\tRun tests\t2026-01-01T00:00:00Z ##[error]Process completed with exit",),
    ),
    Idiom(
        "infra.github.annotation.fact",
        r"##\[error\]\S|::error(?: [^:\n]*)?::\S",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("##[error]Process completed with exit code 1.",),
    ),
)
