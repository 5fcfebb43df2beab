"""shrink-proxy's own markers: an earlier compaction's note is cheap and says what is missing."""

from __future__ import annotations

from proxy.pipeline.compact.markers import MARKER_RE
from proxy.pipeline.idioms.record import MARKER, Idiom

IDIOMS = (
    Idiom(
        "own.marker",
        MARKER_RE.pattern,
        MARKER,
        at="anywhere",
        examples=("[... 412 lines (9,310 tokens) omitted by shrink-proxy ...]",),
        why="our own note: never a fact",
    ),
)
