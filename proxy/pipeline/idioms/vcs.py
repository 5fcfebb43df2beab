"""Version control: git."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom("vcs.git.fatal", r"fatal:", STRONG, "errors", examples=("fatal: not a git repository",)),
    Idiom(
        "vcs.git.conflict",
        r"CONFLICT \([^)\n]*\): \S",
        STRONG,
        "errors",
        examples=("CONFLICT (content): Merge conflict in src/app.py",),
    ),
    Idiom(
        "vcs.git.merge_failed",
        r"Automatic merge failed\b",
        SUMMARY,
        "errors",
        examples=("Automatic merge failed; fix conflicts and then commit the result.",),
        why="a merge's verdict, listed as an error (it ends the result: the verdict anyway)",
    ),
    Idiom(
        "vcs.git.changed",
        r"\d+ files? changed\b",
        SUMMARY,
        "successes",
        examples=(" 3 files changed, 12 insertions(+), 4 deletions(-)",),
    ),
)
