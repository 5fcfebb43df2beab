"""JSON outcomes: the objects of a JSON document that report a failure, one line each.

`kubectl get pods -o json`, `gh run list --json`, `jest --json` and API error bodies say that
something failed in a member, not in a line: `"reason": "CrashLoopBackOff"` six levels down in
one pod of two hundred, `"conclusion": "failure"` in one run. Read as text, no line of them looks
like an error, so when such a result falls into dropped history its failure would leave no fact.

Stage 1 may keep an item that merely mentions a failure word ("pytest-timeout" in a dependency
list, "exceptions" in a package summary); a fact costs more (a few lines of room under the trim
marker), so here a member reports a failure only as a status or a slot for one:
- a short string value that is a failure word as a whole: "failure", "FAILED", "CrashLoopBackOff",
  "OOMKilled", "error";
- an error-like key holding something: `"error": {...}`, `"stderr": "..."`, `"failures": 3`;
- `true` under a key that is a failure word: `"OOMKilled": true`, `"failed": true`.

Each object holding such members gives one line in JSON member syntax: those members, then the
names and ids of the record it belongs to (the outermost array item around it: the pod, the run),
then its other scalar members, while the line stays under `max_chars`. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

from proxy.pipeline.compact.jsonish import FAILURE_KEYS, FAILURE_WORDS, escape_surrogates, parse

_STATUS_CHARS = 40  # a failure status is a word or two, not a sentence that mentions one
_IDENTITY = re.compile(r"(?:name|id|title|key|path|file|url)$", re.IGNORECASE)
_IDENTITY_DEPTH = 2  # names are looked for this deep inside the record (a pod's metadata.name)
_IDENTITIES = 2


def _reports(key: str, value: Any) -> bool:
    if key.lower() in FAILURE_KEYS and value not in (None, False, 0, "", [], {}):
        return True
    if value is True:
        return FAILURE_WORDS.fullmatch(key) is not None
    return (
        isinstance(value, str)
        and len(value) <= _STATUS_CHARS
        and FAILURE_WORDS.fullmatch(value.strip()) is not None
    )


def _member(key: str, value: Any) -> str:
    """`"key": value`, lone surrogates escaped (a fact must be encodable to be sent on)."""
    return escape_surrogates(
        f"{json.dumps(key, ensure_ascii=False)}: "
        + json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    )


def _identities(record: Any) -> list[tuple[str, Any]]:
    """The record's first name-like scalar members, shallowest first (breadth-first)."""
    found: list[tuple[str, Any]] = []
    queue: deque[tuple[Any, int]] = deque([(record, 0)])
    while queue and len(found) < _IDENTITIES:
        node, depth = queue.popleft()
        for key, value in node.items():
            if isinstance(value, dict):
                if depth + 1 < _IDENTITY_DEPTH:
                    queue.append((value, depth + 1))
            elif isinstance(value, (str, int)) and not isinstance(value, bool):
                if _IDENTITY.search(key) and len(found) < _IDENTITIES:
                    found.append((key, value))
    return found


def _line(node: dict[str, Any], failing: list[str], record: Any, max_chars: int) -> str:
    """The failing members whole; then identities and other scalars while the line fits."""
    parts = [_member(k, node[k]) for k in failing]
    length = sum(map(len, parts)) + 2 * (len(parts) - 1)
    extra = _identities(record) if isinstance(record, dict) else []
    extra += [
        (k, v)
        for k, v in node.items()
        if k not in failing and not isinstance(v, (dict, list)) and v is not None
    ]
    for key, value in extra:
        part = _member(key, value)
        if part in parts or length + 2 + len(part) > max_chars:
            continue
        parts.append(part)
        length += 2 + len(part)
    return ", ".join(parts)


def failure_lines(text: str, limit: int = 4, max_chars: int = 200) -> list[str]:
    """Up to `limit` lines, in document order, for the objects of the JSON document `text` holds
    (a short trailer allowed, as stage 1 reads it) that report a failure; [] for other text."""
    if not text.lstrip().startswith(("{", "[")):
        return []
    doc = parse(text)  # None past jsonish.MAX_DEPTH levels, which bounds _walk's recursion
    if doc is None:
        return []
    found: list[str] = []
    _walk(doc.value, None, found, limit, max_chars)
    return found


def _walk(value: Any, record: Any, found: list[str], limit: int, max_chars: int) -> None:
    if len(found) >= limit:
        return
    if isinstance(value, list):
        for item in value:
            # The outermost array item is the record a failure belongs to.
            _walk(item, item if record is None else record, found, limit, max_chars)
        return
    if not isinstance(value, dict):
        return
    failing = [k for k, v in value.items() if _reports(k, v)]
    if failing:
        found.append(_line(value, failing, record, max_chars))
    for key, member in value.items():
        if key not in failing and isinstance(member, (dict, list)):
            _walk(member, record, found, limit, max_chars)
