"""The shape of a generated tool log and the word pool the generators vary (tests/pipeline)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Log:
    name: str
    text: str
    needles: tuple[str, ...]
    kind: str = "log"  # or "json": a document stage 1 rebuilds as JSON


def words(rng: random.Random, n: int) -> str:
    pool = ["parse", "config", "cache", "router", "index", "worker", "client", "schema", "codec"]
    return "_".join(rng.choice(pool) for _ in range(n))
