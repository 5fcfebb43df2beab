"""JSON: shrink a JSON document while keeping it valid JSON with the same structure.

Cutting `npm view --json` or an API response at line boundaries leaves broken JSON and loses the
keys a model navigates by. Instead the document is parsed and rebuilt smaller: objects keep their
keys down to a depth, long arrays keep their first and last items plus an element saying how many
were dropped, long strings lose their middle, deeper parts become a one-string summary. Levels go
from generous to stingy; the first that fits wins. A short trailer after the document (an agent
framework's `[exit code: 0]`) is kept verbatim. If not even the skeleton fits, the caller falls
back to line compaction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.pipeline.compact import markers

Count = Callable[[str], int]

_MAX_TRAILER_CHARS = 300
_MAX_TRAILER_LINES = 3


@dataclass(frozen=True)
class Level:
    items: int  # array items kept (split between head and tail)
    keys: int  # object members kept (split between head and tail)
    chars: int  # string length kept
    depth: int  # containers nested deeper than this become a summary string


LEVELS = (
    Level(256, 200, 2000, 16),
    Level(128, 120, 1200, 12),
    Level(64, 80, 800, 10),
    Level(40, 60, 500, 8),
    Level(24, 40, 300, 7),
    Level(16, 30, 200, 6),
    Level(10, 24, 140, 5),
    Level(6, 16, 100, 4),
    Level(4, 12, 80, 4),
    Level(2, 8, 60, 3),
    Level(1, 6, 40, 2),
    Level(0, 4, 30, 1),
    Level(0, 2, 20, 0),
)


@dataclass(frozen=True)
class Document:
    value: Any
    trailer: str  # what followed the document, verbatim ("" if nothing)
    indent: int | str | None  # None for compact input
    chars: int  # length of the document as it came in


class _DuplicateKeyError(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse objects with repeated keys: rebuilding them as dicts would silently drop members."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKeyError("duplicate key")
    return result


def parse(text: str) -> Document | None:
    """The JSON document `text` holds (leading whitespace and a short trailer allowed), or None."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] not in "[{":
        return None
    try:
        value, end = json.JSONDecoder(object_pairs_hook=_pairs).raw_decode(text, start)
    except ValueError:
        return None
    trailer = text[end:]
    rest = trailer.strip()
    if rest and (len(rest) > _MAX_TRAILER_CHARS or rest.count("\n") >= _MAX_TRAILER_LINES):
        return None
    body = text[start:end]
    return Document(value, rest, _indent(body), len(body))


def _indent(body: str) -> int | str | None:
    """The indentation unit of the input: that of its first indented line."""
    newline = body.find("\n")
    if newline < 0:
        return None
    for line in body[newline + 1 :].split("\n", 8)[:8]:
        stripped = line.lstrip()
        if stripped:
            pad = line[: len(line) - len(stripped)]
            if not pad:
                continue
            return "\t" if pad.startswith("\t") else len(pad)
    return None


def dump(value: Any, indent: int | str | None) -> str:
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(value, ensure_ascii=False, indent=indent)


_quoted = json.encoder.encode_basestring  # what json.dumps(s, ensure_ascii=False) writes for a str


def _scalar_size(value: Any) -> int:
    """len(json.dumps(value, ensure_ascii=False)) for a scalar, without json.dumps' overhead."""
    if isinstance(value, str):
        return len(_quoted(value))
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if type(value) is int:
        return len(int.__repr__(value))
    return len(json.dumps(value, ensure_ascii=False))


class _Sizer:
    """Compact serialised length of every node, computed once per call and reused by all levels."""

    def __init__(self) -> None:
        self._memo: dict[int, int] = {}

    def size(self, value: Any) -> int:
        if isinstance(value, dict):
            key = id(value)
            if key not in self._memo:
                self._memo[key] = 2 + sum(
                    len(_quoted(k)) + 3 + self.size(v) for k, v in value.items()
                )
            return self._memo[key]
        if isinstance(value, list):
            key = id(value)
            if key not in self._memo:
                self._memo[key] = 2 + sum(self.size(v) + 2 for v in value)
            return self._memo[key]
        return _scalar_size(value)


@dataclass(frozen=True)
class _Shrinker:
    level: Level
    sizer: _Sizer
    per_char: float  # tokens per serialised char, measured on the whole input

    def tokens(self, chars: int) -> int:
        return max(1, round(chars * self.per_char))

    def shrink(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict):
            return self._object(value, depth)
        if isinstance(value, list):
            return self._array(value, depth)
        if isinstance(value, str) and len(value) > self.level.chars:
            head = math.ceil(self.level.chars * 0.6)
            tail = self.level.chars - head
            gone = len(value) - head - tail
            note = markers.chars_omitted(gone, self.tokens(gone))
            return f"{value[:head]} {note} {value[len(value) - tail :] if tail else ''}".rstrip()
        return value

    def _summary(self, kind: str, value: dict[str, Any] | list[Any]) -> str:
        return markers.container_omitted(kind, len(value), self.tokens(self.sizer.size(value)))

    def _object(self, value: dict[str, Any], depth: int) -> Any:
        if value and depth >= self.level.depth:
            return self._summary("object", value)
        members = list(value.items())
        keep = self.level.keys
        if len(members) <= keep + 1:
            return {k: self.shrink(v, depth + 1) for k, v in members}
        head = math.ceil(keep / 2)
        tail = keep - head
        dropped = members[head : len(members) - tail]
        chars = sum(len(k) + 4 + self.sizer.size(v) for k, v in dropped)
        result = {k: self.shrink(v, depth + 1) for k, v in members[:head]}
        note = markers.keys_omitted(len(dropped), self.tokens(chars))
        while note in value or note in result:  # never collide with a real key
            note += " "
        result[note] = None
        result.update((k, self.shrink(v, depth + 1)) for k, v in members[len(members) - tail :])
        return result

    def _array(self, value: list[Any], depth: int) -> Any:
        if value and depth >= self.level.depth:
            return self._summary("array", value)
        keep = self.level.items
        if len(value) <= keep + 1:
            return [self.shrink(v, depth + 1) for v in value]
        head = math.ceil(keep / 2)
        tail = keep - head
        dropped = value[head : len(value) - tail]
        chars = sum(self.sizer.size(v) + 2 for v in dropped)
        note = markers.items_omitted(len(dropped), self.tokens(chars))
        kept_tail = value[len(value) - tail :] if tail else []
        return (
            [self.shrink(v, depth + 1) for v in value[:head]]
            + [note]
            + [self.shrink(v, depth + 1) for v in kept_tail]
        )


def compact_json(
    doc: Document, budget: int, count: Count, tokens_before: int
) -> tuple[str, int] | None:
    """The document rebuilt at the most generous level that fits `budget`, with its trailer."""
    trailer = "\n" + doc.trailer if doc.trailer else ""
    room = budget - (count(trailer) + 1 if trailer else 0)
    sizer = _Sizer()
    per_char = tokens_before / max(1, sizer.size(doc.value) + len(trailer))
    per_text_char = tokens_before / max(1, doc.chars + len(trailer))
    for level in LEVELS:
        shrunk = _Shrinker(level, sizer, per_char).shrink(doc.value, 0)
        text = dump(shrunk, doc.indent)
        # The estimate skips exact counts of candidates that are far too big (cheap guard).
        if len(text) * per_text_char > room * 1.6:
            continue
        tokens = count(text)
        if tokens <= room:
            out = text + trailer
            return out, count(out)
    return None
