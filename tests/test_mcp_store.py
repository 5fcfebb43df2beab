"""The bounded store of command outputs behind `read_output`: bounds, expiry, pages."""

from __future__ import annotations

import sys

import pytest

from proxy.mcp.store import OutputGone, OutputStore

TEXT = "".join(f"line {i}\n" for i in range(1, 101))  # 100 lines, "line 1" .. "line 100"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(**bounds) -> OutputStore:
    bounds = {"max_outputs": 4, "max_bytes": 10_000, "ttl": 60.0} | bounds
    return OutputStore(**bounds)


def page(s: OutputStore, ref: str, *args, lines: int = 1000, size: int = 100_000, **kw):
    return s.read(ref, *args, max_lines=lines, max_bytes=size, **kw)


def test_pages_by_line_range_with_the_next_start():
    s = store()
    ref = s.put("seq", TEXT)
    assert ref is not None
    p = page(s, ref, 10, 12)
    assert p.text == "line 10\nline 11\nline 12" and p.total_lines == 100
    assert (p.start_line, p.end_line, p.next_start_line, p.truncated_by) == (10, 12, 13, None)
    p = page(s, ref, 95)
    assert p.text.splitlines()[-1] == "line 100" and p.next_start_line is None
    p = page(s, ref, 1, lines=7)
    assert p.end_line == 7 and p.next_start_line == 8 and p.truncated_by == "lines"
    p = page(s, ref, 1, size=30)  # "line N\n" is 7-9 bytes
    assert p.truncated_by == "bytes" and len(p.text.encode()) <= 30
    assert p.next_start_line == p.end_line + 1


def test_a_line_longer_than_a_page_is_cut_and_its_rest_counted():
    s = store()
    ref = s.put("long", "é" * 5000 + "\nshort\n")
    assert ref is not None
    p = page(s, ref, 1, size=1001)
    assert p.truncated_by == "bytes" and len(p.text.encode()) <= 1000
    assert p.omitted_bytes == 10_000 - len(p.text.encode()) and p.next_start_line == 2


def test_grep_numbers_its_lines_and_takes_alternatives():
    s = store()
    ref = s.put("seq", TEXT + "ERROR: boom\n")
    assert ref is not None
    p = page(s, ref, grep="line 7|error")
    assert p.text.splitlines() == ["7: line 7", "70: line 70"] + [
        f"{n}: line {n}" for n in range(71, 80)
    ] + ["101: ERROR: boom"]
    assert p.matches == 12


def test_bounded_by_count_and_size_and_age_with_a_clear_answer():
    clock = Clock()
    s = store(max_outputs=2, max_bytes=1100, ttl=10.0, clock=clock)
    a, b, c = (s.put(name, "x" * 400) for name in "abc")
    assert a and b and c and len(s) == 2
    with pytest.raises(OutputGone, match="evicted to make room"):
        s.get(a)
    d = s.put("d", "y" * 700)  # 749 + 449 bytes > 1100: b and c go too
    assert d and s.bytes == sys.getsizeof("y" * 700)
    assert s.put("wide", "\U0001f600" * 300) is None  # 300 characters, over 1,200 bytes
    with pytest.raises(OutputGone, match="evicted"):
        s.get(c)
    clock.now = 11
    with pytest.raises(OutputGone, match=r"expired \(outputs are kept for 10 s\)"):
        s.get(d)
    with pytest.raises(OutputGone, match="no output 'out-nope'"):
        s.get("out-nope")
    assert s.put("huge", "z" * 1101) is None and len(s) == 0
