"""Huge tool outputs are digested before they are read line by line (compact.digest)."""

from __future__ import annotations

import re

from proxy.pipeline.compact import compact_text, digest
from tests.pipeline.counters import tik

OMITTED = re.compile(r"\[\.\.\. ([\d,]+) lines? \(([\d,]+) tokens?\) omitted by shrink-proxy")


def build(n: int, planted: dict[int, str]) -> str:
    lines = [f"step {i}: compiled module part{i}.o ok" for i in range(n)]
    for at, line in planted.items():
        lines[at] = line
    return "\n".join(lines)


def kept_lines(out: str) -> int:
    """Lines of the original a compaction shows, plus those its markers say it omitted."""
    shown = [line for line in out.split("\n") if "omitted by shrink-proxy" not in line]
    omitted = sum(int(m.group(1).replace(",", "")) for m in OMITTED.finditer(out))
    return len(shown) + omitted


def test_a_huge_log_keeps_the_errors_of_its_middle_and_counts_every_line() -> None:
    n = 60_000
    text = build(
        n,
        {
            31_000: "ERROR: linker failed: undefined reference to `rb_push'",
            45_000: "Traceback (most recent call last):",
            45_001: '  File "x.py", line 3, in <module>',
            45_002: "ValueError: bad thing",
        },
    )
    assert digest.needed(text)
    done = compact_text(text, 1024, tik)
    assert done is not None and done.tokens_after <= 1024
    assert "undefined reference to `rb_push'" in done.text
    assert "ValueError: bad thing" in done.text
    assert kept_lines(done.text) == n
    assert compact_text(text, 1024, tik) == done  # a function of the text alone


def test_the_digest_is_bounded_however_many_lines_match() -> None:
    """Every line an error: the digest still holds at most its head, tail and picks."""
    text = "\n".join(f"ERROR: job {i} failed" for i in range(200_000))
    d = digest.digest(text)
    lines = d.text.split("\n")
    bound = digest.HEAD_LINES + digest.TAIL_LINES + 3 * digest.MAX_PICKS + len(d.gaps)
    assert len(lines) <= bound
    assert sum(w for w, _ in d.gaps.values()) + len(lines) - len(d.gaps) == 200_000
    assert all(lines[i] == "" for i in d.gaps)


def test_a_huge_single_line_is_read_as_its_head_and_tail() -> None:
    text = "x" * 1_500_000 + " ERROR the end"
    d = digest.digest(text)
    assert len(d.text) <= digest.MAX_LINE + 200
    assert d.text.endswith("ERROR the end")


def test_texts_under_the_bounds_are_not_digested() -> None:
    assert not digest.needed(build(digest.MAX_LINES - 1, {}))
    assert digest.needed(build(digest.MAX_LINES + 1, {}))


def test_a_huge_output_is_read_in_memory_bounded_by_its_size() -> None:
    """Issue 20: a 20 MB single line peaked at 1.1 GB (55x); a huge log at ~40x. Reading and
    compacting one now holds a small multiple of the text (the count is not traced: tiktoken
    is native code, counted in pieces by proxy.pieces)."""
    import tracemalloc

    for text in ("x" * 4_000_000 + "\nERROR: end", build(120_000, {60_000: "ERROR: mid"})):
        tracemalloc.start()
        try:
            done = compact_text(text, 1024, lambda s: len(s) // 4)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert done is not None and "ERROR" in done.text
        assert peak < 3 * len(text), f"{peak / len(text):.1f}x the text"
