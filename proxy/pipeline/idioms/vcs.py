"""Version control: git."""

from __future__ import annotations

from proxy.pipeline.idioms.record import STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom("vcs.git.fatal", r"fatal:", STRONG, examples=("fatal: not a git repository",)),
    Idiom("vcs.git.fatal.fact", r"fatal:", fact="errors", examples=("fatal: bad revision",)),
    Idiom(
        "vcs.git.conflict",
        r"CONFLICT \(",
        STRONG,
        examples=("CONFLICT (content): Merge conflict in src/app.py",),
    ),
    Idiom(
        "vcs.git.merge_failed",
        r"Automatic merge failed\b",
        SUMMARY,
        examples=("Automatic merge failed; fix conflicts and then commit the result.",),
    ),
    Idiom(
        "vcs.git.conflict.fact",
        r"CONFLICT \([^)]*\): \S|Automatic merge failed\b",
        fact="errors",
        examples=("CONFLICT (content): Merge conflict in src/app.py",),
    ),
    Idiom(
        "vcs.git.changed.fact",
        r"\d+ files? changed\b",
        fact="successes",
        examples=("3 files changed, 12 insertions(+), 4 deletions(-)",),
    ),
)
