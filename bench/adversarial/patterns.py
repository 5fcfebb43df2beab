"""Every compiled regular expression in the `proxy` package, found by walking its modules."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Iterator
from typing import Any

import proxy


def _inside(
    value: Any, path: str, depth: int, seen: set[int]
) -> Iterator[tuple[str, re.Pattern[str]]]:
    if id(value) in seen or depth > 4:
        return
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        if isinstance(value.pattern, str):
            yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _inside(v, f"{path}[{k!r}]", depth + 1, seen)
    elif isinstance(value, (list, tuple, frozenset, set)):
        for i, v in enumerate(value):
            yield from _inside(v, f"{path}[{i}]", depth + 1, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _inside(getattr(value, f.name), f"{path}.{f.name}", depth + 1, seen)


def compiled_patterns() -> dict[str, re.Pattern[str]]:
    """`module.NAME[...]` -> pattern, for every pattern reachable from a module's globals."""
    found: dict[str, re.Pattern[str]] = {}
    seen: set[int] = set()
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if isinstance(value, type) or callable(value) and not isinstance(value, re.Pattern):
                continue
            for path, pattern in _inside(value, f"{info.name}.{name}", 0, seen):
                found.setdefault(path, pattern)
    return found
