"""Infrastructure: Terraform, Docker, Kubernetes, apt, GitHub Actions."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "infra.terraform.plan",
        r"Plan: \d+ to add\b",
        SUMMARY,
        "outcomes",
        examples=("Plan: 3 to add, 1 to change, 0 to destroy.",),
        why="what `terraform plan` would do: its verdict",
    ),
    Idiom(
        "infra.terraform.complete",
        r"(?:Apply|Destroy) complete!",
        SUMMARY,
        "outcomes",
        examples=("Apply complete! Resources: 3 added, 0 changed, 0 destroyed.",),
    ),
    Idiom("infra.apt.error", r"E: ", STRONG, "errors", examples=("E: Unable to locate package",)),
    Idiom(
        "infra.apt.upgraded",
        r"\d+ upgraded, \d+ newly installed\b",
        SUMMARY,
        "successes",
        examples=("0 upgraded, 3 newly installed, 0 to remove and 12 not upgraded.",),
    ),
    Idiom(
        "infra.docker.daemon",
        r"\berror response from daemon\b",
        STRONG,
        "errors",
        at="anywhere",
        examples=(
            "docker: Error response from daemon: driver failed programming external connectivity.",
        ),
    ),
    Idiom(
        "infra.states",
        # A row of a status table whose state is a failure: `kubectl get pods` (CrashLoopBackOff,
        # ImagePullBackOff, ErrImagePull, OOMKilled, Evicted), `kubectl get nodes` (NotReady),
        # `docker ps` (Exited with a non-zero code, unhealthy). One such row among hundreds of
        # Running ones is what the listing was run for. Cased: "backoff" and "evicted" in prose
        # are no state.
        r"\b\w*BackOff\b|\bCrashLoop|\bErrImagePull\b|\bOOMKilled\b|\bEvicted\b|\bNotReady\b"
        r"|\bExited \([1-9]\d*\)|\(unhealthy\)",
        MEDIUM,
        "errors",
        at="anywhere",
        cased=True,
        examples=(
            "api-7d4b9c6f5-x2x9q   0/1   CrashLoopBackOff   7   12m",
            "web   Exited (137) 2 minutes ago",
            "db    Up 5 minutes (unhealthy)",
        ),
        counter=("web   Exited (0) 2 minutes ago", "retries with exponential backoff"),
    ),
    Idiom(
        "infra.github.annotation",
        # GitHub Actions' error annotations (`gh run view --log-failed`): `##[error]` and the
        # `::error file=...::` workflow command, behind the job, step and timestamp columns.
        r"##\[error\]\S|::error(?: [^:\n]*)?::\S",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=(
            "build\tRun tests\t2026-01-01T00:00:00Z ##[error]Process completed with exit code 1.",
            "::error file=app.py,line=3::Undefined name",
        ),
    ),
)
