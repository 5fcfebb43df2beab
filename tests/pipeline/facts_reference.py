"""The plain, line-by-line reading of proxy/pipeline/facts.py: the fast one must match it.

tests/pipeline/test_facts_fast.py asserts the live module gives the same output. The fast module
finds its candidate lines with two scans (the idioms' line-start scan and trigger automaton,
proxy.pipeline.idioms.compile) and runs its name patterns only where their literals occur
(proxy.pipeline.scan); this reading runs every line through the same classifier
(`outcomes._error_line`) and every pattern over the whole text. The vocabulary is the live
modules': a change to an idiom or a pattern is made once, there. Only `_DEF` and `_UNIT` are
restated here in their plain form (the fast ones hold their word boundaries in look-behinds).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from proxy.pipeline.compact.markers import MARKER_RE, SIGNATURE
from proxy.pipeline.compact.outline import is_commit_log
from proxy.pipeline.facts import (
    _BACKTICK,
    _DOLLAR,
    _FAILED,
    _FILENAME,
    _NAMED_FILES,
    _NOT_IDENTIFIERS,
    _NUMERIC,
    _PATH,
    _TRAILING,
    _URL,
    _VERSION,
    _clip_failed,
    _rare_first,
)
from proxy.pipeline.json_outcomes import failure_lines
from proxy.pipeline.outcomes import (
    _CODE_START,
    _FOOTER,
    _GO_DETAIL,
    _LISTING,
    _LOCATION,
    _NOT_STATUS,
    _WORD,
    _error_line,
    _fact_of,
)
from proxy.pipeline.types import Message

MAX_FACTS = 40
MAX_FACT_CHARS = 200
# Texts longer than this are scanned only at their head and tail: regexes stay linear-time, but a
# megabyte tool dump would still cost the event loop tens of milliseconds.
MAX_SCAN_CHARS = 200_000
# Per category: (quota, per-message cap). Categories are filled in this order up to their quota,
# then the room left goes to the remaining facts in the same order. The per-message cap always
# holds: one 300-line pytest run or one `npm view versions` listing cannot take every slot.
CATEGORIES: dict[str, tuple[int, int]] = {
    # How each command ended, one line per tool result: its last outcome line (a test-run
    # summary, the exception ending a traceback), else its last error line.
    "verdicts": (12, 1),
    "outcomes": (6, 2),  # the other outcome lines
    "errors": (10, 4),
    # The last line of a command's output when it reads like a status ("151 CA certificates
    # loaded", "Successfully built ...") and is not its verdict.
    "statuses": (8, 1),
    "successes": (6, 2),  # Successfully installed/built ..., added 12 packages, 3 files changed
    "commands": (8, 8),
    "paths": (8, 6),
    "versions": (4, 3),
    "urls": (4, 3),
    "identifiers": (4, 3),
    "numbers": (2, 2),
}
COMMAND_KEYS = ("cmd", "command", "script")
PATH_KEYS = ("path", "file", "filename", "file_path", "filepath", "cwd", "directory", "dir")

_DEF = re.compile(r"\b(?:def|class|function|func|fn)\s+([A-Za-z_]\w*)")
_UNIT = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:ms|s|sec|seconds?|minutes?|min|h|hours?|[KMGT]i?B|bytes|%"
    r"|tokens|lines|files|tests|passed|failed|errors?|warnings?|skipped)(?![\w%])"
)
_BARE_GUTTER = re.compile(r"^[ \t]+\|[ \t]*(?:[\^~-][^\n]*)?$", re.MULTILINE)
_BOX = "│"  # Terraform draws a box edge before each line of a diagnostic
_GO_FAIL = re.compile(r"\s*--- FAIL:")


def normalise(text: str) -> str:
    """Collapse runs of whitespace into one space: facts are compared this way."""
    return " ".join(text.split())


def _clip(text: str) -> str:
    """Normalise and bound a fact; a long one keeps its head, cut at a space when one is near."""
    text = normalise(text)
    if len(text) <= MAX_FACT_CHARS:
        return text
    if (failed := _FAILED.match(text)) is not None:
        return _clip_failed(text, failed)
    head = text[:MAX_FACT_CHARS]
    space = head.rfind(" ")
    return head[:space] if space > MAX_FACT_CHARS * 0.6 else head


def _unmarked(text: str) -> str:
    """Lines that are one of our markers, emptied (their numbers are never facts)."""
    if SIGNATURE not in text:
        return text
    lines = text.split("\n")
    return "\n".join("" if MARKER_RE.fullmatch(x.strip(" \t")) else x for x in lines)


def _scan_window(text: str) -> str:
    if len(text) <= MAX_SCAN_CHARS:
        return text
    half = MAX_SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def _texts(message: Any) -> Iterator[str]:
    """Content texts of a message (string or text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def _calls(message: Any) -> Iterator[tuple[Any, str]]:
    """(parsed arguments, raw arguments) of each tool call or legacy function call."""
    calls = message.get("tool_calls")
    functions = (
        [c.get("function") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    )
    if isinstance(message.get("function_call"), dict):
        functions.append(message["function_call"])
    for fn in functions:
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        if not isinstance(raw, str):
            continue
        try:
            args = orjson.loads(raw)
        except orjson.JSONDecodeError:
            args = None
        yield args, raw


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _bare(stripped: str) -> str:
    """A stripped line without Valgrind's `==PID==` prefix (and the spaces after it)."""
    pid = re.match(r"==\d+==", stripped)
    return stripped[pid.end() :].strip() if pid else stripped


def _error_lines(text: str) -> Iterator[tuple[str, str]]:
    """(category, line) for lines that report an error or how a run ended.

    Categories: "outcomes" (test-run summary lines and the last line of each Python traceback),
    "successes" (a package manager's or VCS's closing line), "errors", and "locations" (the line
    after an error, blank lines and Terraform's box edge between, when it says where the error
    happened: an error line, but never a verdict). A go test's message on the line next to its
    `--- FAIL:` line is an error.
    """
    in_traceback = after_error = False
    # stdout flushed in blocks, Valgrind's stderr at once: a report line may follow half a line.
    lines = re.sub(r"(?<=[^\n=])(?===\d+==)", "\n", text).splitlines()
    framed = "|" in text and _BARE_GUTTER.search(text) is not None
    for n, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if in_traceback:
            if line[:1].isspace() or stripped.startswith("[..."):
                continue
            in_traceback = False
            yield "outcomes", stripped
            continue
        if after_error:
            bare = _bare(stripped).lstrip(_BOX).strip()
            if not bare:
                continue
            after_error = False
            if _LOCATION.match(bare):
                yield "locations", _bare(stripped)
                continue
        if stripped.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if _GO_DETAIL.match(line) and (
            (n > 0 and _GO_FAIL.match(lines[n - 1]))
            or (n + 1 < len(lines) and _GO_FAIL.match(lines[n + 1]))
        ):
            yield "errors", stripped
            continue
        if not _bare(stripped):
            continue
        fact = _error_line(line, framed)
        if fact is not None:
            yield fact
            after_error = fact[0] == "errors"


def _status_line(text: str) -> str | None:
    """The last line of a command's output when it reads like a status ("151 CA certificates
    loaded", "No broken requirements found."): footers, notices and bare punctuation skipped;
    source listings, `ls -l` rows and single tokens are not statuses."""
    lines = text.splitlines()
    if sum(bool(line.strip()) for line in lines) < 2:
        return None  # a one-line result is a confirmation ("Edited x.py"), not a run's status
    for line in reversed(lines[-12:]):
        stripped = line.strip()
        if (
            not stripped
            or _FOOTER.search(stripped)
            or _fact_of(stripped, stripped.lower(), "veto")
            or not any(c.isalnum() for c in stripped)
        ):
            continue
        if _LISTING.match(line) or line[:1].isspace() or stripped.startswith(_CODE_START):
            return None
        if sum(bool(_WORD.fullmatch(w)) for w in stripped.split()) < 2 or _NOT_STATUS.match(
            stripped
        ):
            return None
        return stripped
    return None


def _verdict(text: str, failures: Sequence[str] = ()) -> str | None:
    """How one command's output ended: its last outcome line, else its last error line (its
    JSON failures, if any, come after its error lines)."""
    outcome = error = None
    for category, line in [*_error_lines(text), *(("errors", f) for f in failures)]:
        if category == "outcomes":
            outcome = line
        elif category == "errors":
            error = line
    return outcome or error


def _paths(text: str) -> Iterator[str]:
    text = _URL.sub(" ", text)
    for m in _PATH.finditer(text):
        path = m.group(0).rstrip(_TRAILING)
        segments = [s for s in path.split("/") if s not in ("", ".", "..", "~")]
        if not segments or any(_NUMERIC.fullmatch(s) for s in segments):
            continue  # dates, fractions, progress counters (64.9/64.9)
        anchored = path.startswith(("/", "~/", "./", "../"))
        has_ext = "." in segments[-1].strip(".")
        if anchored and (len(segments) >= 2 or has_ext) or has_ext or path.count("/") >= 2:
            yield path
    for m in _FILENAME.finditer(text):
        yield m.group(0)
    for m in _NAMED_FILES.finditer(text):
        yield m.group(0)


def _command(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return None


def _candidates(message: Any) -> dict[str, list[str]]:
    """Every fact of one message by category, in order of appearance (duplicates included)."""
    found: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    texts = [_unmarked(_scan_window(t)) for t in _texts(message)]
    failures: list[str] = []  # the last text's JSON failures: error lines after its own
    last = len(texts) - 1
    tool = message.get("role") in ("tool", "function") and bool(texts)
    log = tool and is_commit_log(texts[-1])  # a git log's prose: no errors, no status
    if tool:
        failures = failure_lines(texts[-1], CATEGORIES["errors"][1], MAX_FACT_CHARS)
        verdict = _verdict(texts[-1], failures) if not log else None
        status = _status_line(texts[-1]) if not log else None
        if verdict:
            found["verdicts"].append(verdict)
        if status and not (verdict and verdict in status):
            found["statuses"].append(status)
    for args, raw in _calls(message):
        if isinstance(args, dict):
            for key in COMMAND_KEYS:
                command = _command(args.get(key))
                if command:
                    found["commands"].append(command)
            for key in PATH_KEYS:
                if isinstance(args.get(key), str) and args[key].strip():
                    found["paths"].append(args[key].strip())
            texts.extend(_scan_window(s) for s in _strings(args))
        else:
            texts.append(_scan_window(raw))
    for n, text in enumerate(texts):
        for category, line in [] if log and n == last else _error_lines(text):
            found["errors" if category == "locations" else category].append(line)
        if n == last:
            found["errors"].extend(failures)
        found["commands"].extend(m.group(1) for m in _DOLLAR.finditer(text))
        found["paths"].extend(_paths(text))
        found["versions"].extend(m.group(0) for m in _VERSION.finditer(text))
        found["urls"].extend(m.group(0).rstrip(_TRAILING) for m in _URL.finditer(text))
        found["identifiers"].extend(m.group(1) for m in _BACKTICK.finditer(text))
        found["identifiers"].extend(m.group(1) for m in _DEF.finditer(text))
        found["numbers"].extend(m.group(0) for m in _UNIT.finditer(text))
    found["identifiers"] = [
        i for i in found["identifiers"] if len(i.rstrip("()")) >= 3 and i not in _NOT_IDENTIFIERS
    ]
    found["errors"] = _rare_first(found["errors"])
    return found


def extract_facts(
    span: list[Message], *, limit: int = MAX_FACTS, quotas: dict[str, tuple[int, int]] | None = None
) -> list[str]:
    """The facts of `span`, deduplicated, at most `limit`, by category priority then first sight.

    A fact that is a substring of a kept one is dropped (the longer one carries it), so the list
    never spends two slots on `/a/b.py` and `cat /a/b.py`.
    """
    quotas = CATEGORIES if quotas is None else quotas
    per_message = [_candidates(m) for m in span if isinstance(m, dict)]
    kept: list[str] = []
    seen: set[str] = set()

    def take(fact: str) -> bool:
        if not fact or fact in seen:
            return False
        seen.add(fact)
        if any(fact in k for k in kept):
            return False
        kept[:] = [k for k in kept if k not in fact]
        kept.append(fact)
        return True

    leftovers: list[tuple[int, str]] = []  # (category rank, fact) for the second round
    for rank, (category, (quota, per_msg)) in enumerate(quotas.items()):
        taken = 0
        for found in per_message:
            unique = list(dict.fromkeys(_clip(f) for f in found[category]))
            for fact in unique[:per_msg]:
                if taken < quota and len(kept) < limit:
                    taken += take(fact)
                else:
                    leftovers.append((rank, fact))
    for _, fact in sorted(leftovers, key=lambda item: item[0]):  # stable: first-seen order
        if len(kept) >= limit:
            break
        take(fact)
    return kept


def missing_facts(summary: str, facts: list[str]) -> list[str]:
    """The facts that `summary` does not contain (case-sensitive, after whitespace normalising)."""
    text = normalise(summary)
    return [f for f in facts if normalise(f) not in text]
