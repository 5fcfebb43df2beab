"""Token counters the stage-1 tests share: real cl100k_base, and a crude bytes/4 one."""

from __future__ import annotations

from functools import cache

import tiktoken


@cache
def _enc() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base")


def tik(s: str) -> int:
    return len(_enc().encode(s, disallowed_special=()))


def crude(s: str) -> int:
    return len(s.encode()) // 4 + 1
