"""JSON: shrink a JSON document while keeping it valid JSON with the same structure.

Cutting `npm view --json` or an API response at line boundaries leaves broken JSON and loses the
keys a model navigates by. Instead the document is parsed and rebuilt smaller: objects keep their
keys down to a depth, long arrays keep their first and last items plus an element saying how many
were dropped, long strings lose their middle (where that saves more than the note costs), deeper
parts become a one-string summary, or, for an object with a `name`, `id`, `version`..., those
members and a note for the rest. An item from the middle of an array that reports a failure (a
crash-looping pod, the one failed run) is kept too, a few levels deeper than the rest. Levels go
from generous to stingy; the first that fits wins, and then takes more items at its depth while
they fit. A short trailer after the document (an agent framework's `[exit code: 0]`) is kept
verbatim. If not even the skeleton fits, the caller falls back to line compaction.

Any valid JSON text goes through without an error. A document nested deeper than MAX_DEPTH is
not read as JSON at all (it is compacted as lines): that bound is what keeps the recursive walks
below (`_Shrinker`, `_Sizer`, `_Failures`, json.dumps) within Python's stack, and a document of
a thousand levels has no structure a model would navigate by. Escapes that make no character
(a lone surrogate, `"\\ud800"`) are written back as escapes: a Python str holding one cannot be
encoded as UTF-8, so the request could not be sent on.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.pipeline.compact import markers
from proxy.pipeline.work import Work, check

Count = Callable[[str], int]

_MAX_TRAILER_CHARS = 300
_MAX_TRAILER_LINES = 3


@dataclass(frozen=True)
class Level:
    items: int  # array items kept (split between head and tail)
    keys: int  # object members kept (split between head and tail)
    chars: int  # string length kept
    depth: int  # containers nested deeper than this become a summary string
    # Items from an array's middle that report a failure, at most (None: half of `items`).
    failed: int | None = None


# Items added, at most, to the first level that fits (see compact_json).
WIDEN = 16
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


# Containers nested deeper than this: not read as JSON (see the module docstring). The walks take
# two or three stack frames per level, so this stays far below Python's limit of 1,000 frames.
MAX_DEPTH = 100
_INFINITIES = (math.inf, -math.inf)


class _DuplicateKeyError(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse objects with repeated keys: rebuilding them as dicts would silently drop members."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKeyError("duplicate key")
    return result


def _readable(value: Any) -> bool:
    """Whether no container in `value` is nested deeper than MAX_DEPTH (walked iteratively) and
    no number is past a float's range (`1e400`, which Python reads as infinity and json.dumps
    would write back as `Infinity`, not JSON)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    push, pop = stack.append, stack.pop
    while stack:
        node, depth = pop()
        if depth > MAX_DEPTH:
            return False
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                push((child, depth + 1))
            elif type(child) is float and child in _INFINITIES:
                return False
    return True


def parse(text: str) -> Document | None:
    """The JSON document `text` holds (leading whitespace and a short trailer allowed), or None:
    also for a document nested deeper than MAX_DEPTH, never an exception."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] not in "[{":
        return None
    try:
        value, end = json.JSONDecoder(object_pairs_hook=_pairs).raw_decode(text, start)
    except (ValueError, RecursionError):  # the scanner recurses in C, up to Python's limit
        return None
    if not _readable(value):
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
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    else:
        text = json.dumps(value, ensure_ascii=False, indent=indent)
    return escape_surrogates(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON text with each lone surrogate (from an escape such as `"\\ud800"`) written back as
    its escape. They only occur inside string literals, where the escape means the same."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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


# An array item that reports a failure is kept from the middle too (a pod in CrashLoopBackOff
# among 200 running ones, the one check that failed): said in a string value, or by an
# error-like member that holds something. A word right after "no", "0", "zero", "without" or
# "not" reports none ("No errors found", "0 failures", "not failed").
FAILURE_WORDS = re.compile(
    r"(?<!\bno )(?<!\b0 )(?<!\bzero )(?<!\bwithout )(?<!\bnot )"
    r"\b(?:errors?|fail(?:ed|ing|ures?|s)?|exceptions?|fatal|panic(?:ked)?|crash\w*|denied"
    r"|refused|invalid|timed? ?out|unhealthy|\w*backoff|oom\w*|killed|aborted)\b",
    re.IGNORECASE,
)
# How many levels deeper than the others an array item that reports a failure, and the path to
# a failure, are shown (a pod's waiting reason sits six levels down in `kubectl get pods -o json`).
FAILURE_DEPTH = 3
FAILURE_KEYS = frozenset(
    {"error", "errors", "err", "exception", "failure", "failures", "stderr", "fault", "faults"}
)
# The members that say which thing an object is. An object nested too deep for the level keeps
# those that are short scalars (at most MAX_IDENTITY) beside the note for the rest: a list of 25
# installed packages cut to its depth still names each package and its version.
IDENTITY_KEYS = frozenset(
    {"name", "id", "uid", "key", "version", "title", "kind", "type", "status", "state", "slug"}
)
MAX_IDENTITY = 3
_IDENTITY_CHARS = 80
# A string is cut only where that saves more than the note it leaves costs.
_NOTE_CHARS = len(markers.chars_omitted(99_999, 99_999))


class _Failures:
    """Which containers report a failure anywhere inside, computed once per node and call."""

    def __init__(self) -> None:
        self._memo: dict[int, bool] = {}
        self._items: dict[int, list[int]] = {}

    def items(self, value: list[Any]) -> list[int]:
        """The indices of an array's items that report a failure (each level asks again)."""
        key = id(value)
        found = self._items.get(key)
        if found is None:
            found = self._items[key] = [i for i, v in enumerate(value) if self.reports(v)]
        return found

    def reports(self, value: Any) -> bool:
        if isinstance(value, str):
            return FAILURE_WORDS.search(value) is not None
        if not isinstance(value, (dict, list)):
            return False
        key = id(value)
        found = self._memo.get(key)
        if found is None:
            if isinstance(value, dict):
                found = any(
                    (k.lower() in FAILURE_KEYS and v not in (None, False, 0, "", [], {}))
                    or self.reports(v)
                    for k, v in value.items()
                )
            else:
                found = any(self.reports(v) for v in value)
            self._memo[key] = found
        return found


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
    failures: _Failures
    per_char: float  # tokens per serialised char, measured on the whole input

    def tokens(self, chars: int) -> int:
        return max(1, round(chars * self.per_char))

    def shrink(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict):
            return self._object(value, depth)
        if isinstance(value, list):
            return self._array(value, depth)
        if isinstance(value, str) and len(value) > self.level.chars + _NOTE_CHARS:
            head = math.ceil(self.level.chars * 0.6)
            tail = self.level.chars - head
            gone = len(value) - head - tail
            note = markers.chars_omitted(gone, self.tokens(gone))
            return f"{value[:head]} {note} {value[len(value) - tail :] if tail else ''}".rstrip()
        return value

    def _too_deep(self, value: dict[str, Any] | list[Any], depth: int) -> bool:
        """Past the level's depth a container becomes a summary, unless it reports a failure:
        the path to a failure may go FAILURE_DEPTH levels deeper."""
        if depth < self.level.depth:
            return False
        return depth >= self.level.depth + FAILURE_DEPTH or not self.failures.reports(value)

    def _summary(self, kind: str, value: dict[str, Any] | list[Any]) -> str:
        return markers.container_omitted(kind, len(value), self.tokens(self.sizer.size(value)))

    def _object(self, value: dict[str, Any], depth: int) -> Any:
        if value and self._too_deep(value, depth):
            return self._identity(value) or self._summary("object", value)
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

    def _identity(self, value: dict[str, Any]) -> dict[str, Any] | None:
        """An object's identity members and a note for the others, or None if it has none."""
        kept = [
            (k, v)
            for k, v in value.items()
            if k.lower() in IDENTITY_KEYS
            and (
                type(v) in (int, float, bool) or (isinstance(v, str) and len(v) <= _IDENTITY_CHARS)
            )
        ][:MAX_IDENTITY]
        if not kept:
            return None
        result = dict(kept)
        rest = len(value) - len(kept)
        if rest:
            chars = self.sizer.size(value) - sum(len(k) + 4 + self.sizer.size(v) for k, v in kept)
            note = markers.keys_omitted(rest, self.tokens(chars))
            while note in value:  # never collide with a real key
                note += " "
            result[note] = None
        return result

    def _array(self, value: list[Any], depth: int) -> Any:
        if value and self._too_deep(value, depth):
            return self._summary("array", value)
        keep = self.level.items
        if len(value) <= keep + 1:
            return [self.shrink(v, depth + 1) for v in value]
        head = math.ceil(keep / 2)
        tail = keep - head
        end = len(value) - tail
        # Up to half as many again (at least one) from the middle: the first items there that
        # report a failure.
        middle = (i for i in self.failures.items(value) if head <= i < end)
        failed = self.level.failed
        if failed is None:
            failed = max(1, keep // 2) if keep else 0
        extra = itertools.islice(middle, failed)
        kept = [*range(head), *extra, *range(end, len(value))]
        out: list[Any] = []
        after = 0  # first index not yet kept or noted
        for i in kept:
            if i > after:
                gap = value[after:i]
                chars = sum(self.sizer.size(v) + 2 for v in gap)
                out.append(markers.items_omitted(len(gap), self.tokens(chars)))
            # An item that reports a failure is shown FAILURE_DEPTH levels deeper than the
            # others, its name and ids beside the failure.
            relax = FAILURE_DEPTH if self.failures.reports(value[i]) else 0
            out.append(self.shrink(value[i], depth + 1 - relax))
            after = i + 1
        if after < len(value):  # no tail kept (keep is 1)
            gap = value[after:]
            out.append(
                markers.items_omitted(
                    len(gap), self.tokens(sum(self.sizer.size(v) + 2 for v in gap))
                )
            )
        return out


def compact_json(
    doc: Document, budget: int, count: Count, tokens_before: int, work: Work | None = None
) -> tuple[str, int] | None:
    """The document rebuilt at the most generous level that fits `budget`, with its trailer.
    `work` is checked before each level is built."""
    trailer = "\n" + doc.trailer if doc.trailer else ""
    room = budget - (count(trailer) + 1 if trailer else 0)
    sizer, failures = _Sizer(), _Failures()
    per_char = tokens_before / max(1, sizer.size(doc.value) + len(trailer))
    per_text_char = tokens_before / max(1, doc.chars + len(trailer))

    def fitting(level: Level) -> str | None:
        check(work)
        shrunk = _Shrinker(level, sizer, failures, per_char).shrink(doc.value, 0)
        text = dump(shrunk, doc.indent)
        # The estimate skips exact counts of candidates that are far too big (cheap guard).
        if len(text) * per_text_char > room * 1.6:
            return None
        return text if count(text) <= room else None

    for k, level in enumerate(LEVELS):
        text = fitting(level)
        if text is None:
            continue
        # A level's steps are coarse (half the items, a level less deep at once): the first
        # that fits may leave much of the budget unused. More items at the same depth, one at
        # a time up to four levels before's count (and at most WIDEN more), take what they can.
        failed = max(1, level.items // 2) if level.items else 0
        top = min(LEVELS[max(0, k - 4)].items, level.items + WIDEN)
        for items in range(level.items + 1, top + 1):
            # Not monotonic (an odd count splits head and tail otherwise): each is tried.
            more = fitting(replace(level, items=items, failed=failed))
            text = more if more is not None else text
        out = text + trailer
        return out, count(out)
    return None
