"""Facts: the exact strings a summary of dropped history must not lose.

A model asked to summarise a coding session paraphrases; a paraphrased path, command or error
message is useless to the agent that continues from it. So before summarising, the strings that
matter are pulled out of the span by regex (error lines, commands, file paths, versions, URLs,
identifiers, numbers with units), and after summarising, those the summary dropped are appended
verbatim. Pure: no I/O; junk messages never raise.

Facts are whitespace-normalised (runs of whitespace become one space) and compared that way.

Speed matters: a never-seen conversation's whole dropped span is scanned on the request path, so
no pattern is tried line by line over a whole text. Verdicts, error and status lines come from
`proxy.pipeline.outcomes`, which reads only the lines its two scans find; a JSON tool result's
failed items from `proxy.pipeline.json_outcomes`. Paths, file names and
versions are looked for only in the words holding what each match must (a "/", a ".py", a
digit-dot-digit), URLs in the lines holding "://"; the other patterns start with characters the
regex engine skips to in C. A message's categories are read lazily: extract_facts takes a few
facts of each. The facts picked are exactly those of the plain line-by-line scan
(tests/pipeline/test_facts_fast.py). What a pick reads of each message (`message_facts`) is
combined per span by `proxy.pipeline.span_facts`, so stage 2, which weighs many spans of one
history, reads each message once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

from proxy.pipeline.compact.markers import MARKER_RE, SIGNATURE
from proxy.pipeline.compact.outline import is_commit_log
from proxy.pipeline.compact.scoring import shape
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.json_outcomes import failure_lines
from proxy.pipeline.outcomes import error_lines, last_verdict, status_line
from proxy.pipeline.scan import find_in, lines_with, words_with
from proxy.pipeline.span_facts import MessageFacts, Quotas, Selection, SpanFacts
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
# Categories whose facts are whole output lines (how things ended); the others are names.
LINE_CATEGORIES = frozenset(("verdicts", "outcomes", "errors", "statuses", "successes"))
COMMAND_KEYS = ("cmd", "command", "script")
PATH_KEYS = ("path", "file", "filename", "file_path", "filepath", "cwd", "directory", "dir")

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]}]+")
# A path starts where no character of a path comes before it (a `+` neither: otherwise every
# character after one in a long `+a+a+a` word would start a path of its own, read to the end).
_PATH = re.compile(
    r"(?<![\w/.~@:+-])"
    r"(?:~|\.{1,2})?/?(?:[\w.@+-]++/)+[\w.@+-]++"  # a/b, /a/b, ~/a, ./a, ../a
)
_EXT = (
    "py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|toml|ya?ml|cfg|ini|conf|txt|md|rst|c|h|cc|"
    "cpp|hpp|go|rs|java|kt|rb|php|sh|bash|lock|html|css|scss|sql|xml|gradle|env|log|csv|dockerfile"
)
_FILENAME = re.compile(rf"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:{_EXT})(?![\w/])")
_NAMED_FILES = re.compile(r"(?<![\w/.-])(?:Makefile|Dockerfile|Containerfile|Procfile)(?![\w/.])")
_DOLLAR = re.compile(r"^[^\S\n]*\$ +(\S.*)$", re.M)  # blanks of its own line only
# A named pin starts at a name's first letter, not after a hyphen inside it (every letter after a
# hyphen of a long `a-a-a` word would read the rest again); its runs are read once (possessive:
# what follows them is none of their characters).
_VERSION = re.compile(
    r"(?:(?<![\w.-])[A-Za-z][\w.-]*+(?:==|>=|<=|~=|!=|@)v?\d+(?:\.\d+)+[\w.+-]*+"  # pkg==1.2.3
    r"|(?<![\w.])(?:v\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?"  # v1.2.3
    r"|\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc|dev|post|alpha|beta|pre)\d*)?))(?![\w.])"  # 1.2.3rc1
)
_BACKTICK = re.compile(r"`([A-Za-z_][\w.]*(?:\(\))?)`")
# `\bdef\s+name`, etc., written with the word boundary as a look-behind after the keyword, so the
# pattern starts with literals and the engine only tries positions holding a "d", "c" or "f".
_DEF = re.compile(
    r"(?:def(?<!\wdef)|class(?<!\wclass)|function(?<!\wfunction)|func(?<!\wfunc)|fn(?<!\wfn))"
    r"\s+([A-Za-z_]\w*)"
)
# `(?<![\w.])\d+...` with the look-behind moved after the first digit, so the engine only tries
# positions holding a digit.
_UNIT = re.compile(
    r"\d(?<![\w.]\d)\d*(?:[.,]\d+)?\s?(?:ms|s|sec|seconds?|minutes?|min|h|hours?|[KMGT]i?B|bytes|%"
    r"|tokens|lines|files|tests|passed|failed|errors?|warnings?|skipped)(?![\w%])"
)
_NOT_IDENTIFIERS = frozenset({"None", "True", "False", "null", "true", "false", "self", "cls"})
_NUMERIC = re.compile(r"^[\d.,:]+")
_TRAILING = ".,:;!?)]}'\"`"
# What every match of a pattern holds (for proxy.pipeline.scan.find_in). _URL's matches never
# cross a newline; those of _PATH, _FILENAME, _NAMED_FILES and _VERSION are made of scan.WORDISH
# characters, and what their look-aheads test is too.
_SCHEME = re.compile("://")  # _URL
_SLASH = re.compile("/")  # _PATH
_FILE_END = re.compile(rf"\.(?:{_EXT})(?![\w/])")  # _FILENAME
_FILE_WORD = re.compile("file")  # _NAMED_FILES
_DIGIT_DOT = re.compile(r"\.(?<=\d\.)\d")  # _VERSION
_DEF_WORDS = ("def", "class", "fn", "func")  # _DEF (function holds func)


def normalise(text: str) -> str:
    """Collapse runs of whitespace into one space: facts are compared this way."""
    return " ".join(text.split())


def _clip(text: str) -> str:
    """Normalise and bound a fact; a long one keeps its head, cut at a space when one is near."""
    return _clip_whole(text)[0]


# A test runner's failure line, `FAILED <test id> - <ExceptionType>: <message>` (pytest's short
# summary). Its head alone loses the exception when the id is long (parametrized tests): the
# id's middle goes instead, and the message is what is left of the room. Anchored, and `\S+`
# cannot cross the " - " it needs: linear.
_FAILED = re.compile(r"(FAILED|ERROR) (\S+) - ([A-Za-z_][\w.]*)(:?)")
_MESSAGE_ROOM = 48  # characters of the message kept when the id must be cut to make room


def _clip_failed(text: str, m: re.Match[str]) -> str:
    verdict, test, exc, colon = m.groups()
    fixed = len(verdict) + 4 + len(exc) + len(colon)
    room = MAX_FACT_CHARS - fixed - _MESSAGE_ROOM
    if len(test) > room:
        keep = max(room - 1, 8)
        test = f"{test[: keep * 2 // 3]}…{test[len(test) - keep // 3 :]}"
    out = f"{verdict} {test} - {exc}{colon}"
    rest = text[m.end() :]
    return out + rest[: max(0, MAX_FACT_CHARS - len(out))]


def _clip_whole(text: str) -> tuple[str, bool]:
    """_clip(text), and whether that is the whole line: not clipped, no elision of stage 1's
    inside (the only facts that hold its signature are lines it cut in the middle)."""
    text = normalise(text)
    if len(text) <= MAX_FACT_CHARS:
        return text, SIGNATURE not in text
    failed = _FAILED.match(text)
    if failed is not None:
        return _clip_failed(text, failed), False
    head = text[:MAX_FACT_CHARS]
    space = head.rfind(" ")
    return (head[:space] if space > MAX_FACT_CHARS * 0.6 else head), False


_OWN_LINE = re.compile(rf"(?m)^[ \t]*(?:{MARKER_RE.pattern})[ \t]*$")


def _unmarked(text: str) -> str:
    """The text without stage 1's notes on lines of their own: their counts ("412 lines",
    "9,310 tokens") and refs are ours, never a fact, and would take the room of the program's
    own lines. A note inside a line (its middle cut) stays: it says the line is not whole."""
    return _OWN_LINE.sub("", text) if SIGNATURE in text else text


def _scan_window(text: str) -> str:
    if len(text) <= MAX_SCAN_CHARS:
        return text
    half = MAX_SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a parsed JSON value, in document order.

    Iterative: tool-call arguments are parsed by orjson, which accepts 1,024 levels, and a
    recursive walk of 1,000 levels overflowed Python's stack (an HTTP 500 for the request).
    """
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for v in stack[-1]:
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict):
                stack.append(iter(v.values()))
                break
            elif isinstance(v, list):
                stack.append(iter(v))
                break
        else:
            stack.pop()


def _urls(text: str) -> list[re.Match[str]]:
    return list(find_in(lines_with, _URL, text, _SCHEME)) if "://" in text else []


def _paths(text: str) -> Iterator[str]:
    """File paths, then file names, then well-known extensionless names; URLs are not paths."""
    urls = _urls(text)
    if urls:  # _URL.sub(" ", text)
        pieces: list[str] = []
        last = 0
        for m in urls:
            pieces += (text[last : m.start()], " ")
            last = m.end()
        pieces.append(text[last:])
        text = "".join(pieces)
    if "/" in text:
        for m in find_in(words_with, _PATH, text, _SLASH):
            path = m.group(0).rstrip(_TRAILING)
            segments = [s for s in path.split("/") if s not in ("", ".", "..", "~")]
            if not segments or any(_NUMERIC.fullmatch(s) for s in segments):
                continue  # dates, fractions, progress counters (64.9/64.9)
            anchored = path.startswith(("/", "~/", "./", "../"))
            has_ext = "." in segments[-1].strip(".")
            if anchored and (len(segments) >= 2 or has_ext) or has_ext or path.count("/") >= 2:
                yield path
    if "." in text:
        for m in find_in(words_with, _FILENAME, text, _FILE_END):
            yield m.group(0)
    if "file" in text:
        for m in find_in(words_with, _NAMED_FILES, text, _FILE_WORD):
            yield m.group(0)


def _commands(text: str) -> Iterator[str]:
    if "$" in text:
        for m in _DOLLAR.finditer(text):
            yield m.group(1)


def _versions(text: str) -> Iterator[str]:
    if "." in text:
        for m in find_in(words_with, _VERSION, text, _DIGIT_DOT):
            yield m.group(0)


def _identifiers(text: str) -> Iterator[str]:
    if "`" in text:
        for m in _BACKTICK.finditer(text):
            yield m.group(1)
    if any(word in text for word in _DEF_WORDS):
        for m in _DEF.finditer(text):
            yield m.group(1)


def _command(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return None


def _facts(message: Any, dialect: Dialect = CHAT) -> dict[str, Iterable[str]]:
    """Every fact of one message by category, in order of appearance (duplicates included).

    Error lines (and so verdicts, outcomes and successes) are found at once; the other categories
    are iterators that scan the texts as they are read, since a caller may need only their first
    few facts."""
    found: dict[str, Iterable[str]] = {c: [] for c in CATEGORIES}
    texts = [_unmarked(_scan_window(t)) for t in dialect.plain_texts(message)]
    last_text, last_errors = -1, []
    if dialect.is_result(message) and texts:
        # The last text is read once, for the verdict and for the error lines. A `git log`'s
        # messages are prose about past work ("fix the error in ..."): no errors, no status.
        log = is_commit_log(texts[-1])
        last_text, last_errors = len(texts) - 1, [] if log else error_lines(texts[-1])
        # A JSON result says how it went in members, not lines (see json_outcomes).
        failures = failure_lines(texts[-1], CATEGORIES["errors"][1], MAX_FACT_CHARS)
        last_errors = last_errors + [("errors", line) for line in failures]
        verdict, status = last_verdict(last_errors), None if log else status_line(texts[-1])
        if verdict:
            found["verdicts"] = [verdict]
        if status and not (verdict and verdict in status):
            found["statuses"] = [status]
    commands: list[str] = []
    paths: list[str] = []
    for args, raw in dialect.calls(message):
        if isinstance(args, dict):
            for key in COMMAND_KEYS:
                command = _command(args.get(key))
                if command:
                    commands.append(command)
            for key in PATH_KEYS:
                if isinstance(args.get(key), str) and args[key].strip():
                    paths.append(args[key].strip())
            texts.extend(_scan_window(s) for s in _strings(args))
        else:
            texts.append(_scan_window(raw))
    lines: dict[str, list[str]] = {"outcomes": [], "successes": [], "errors": []}
    for n, text in enumerate(texts):
        for category, line in last_errors if n == last_text else error_lines(text):
            lines["errors" if category == "locations" else category].append(line)
    lines["errors"] = _rare_first(lines["errors"])
    found.update(lines)
    found["commands"] = chain(commands, (c for t in texts for c in _commands(t)))
    found["paths"] = chain(paths, (p for t in texts for p in _paths(t)))
    found["versions"] = (v for t in texts for v in _versions(t))
    found["urls"] = (m.group(0).rstrip(_TRAILING) for t in texts for m in _urls(t))
    found["identifiers"] = (
        i
        for t in texts
        for i in _identifiers(t)
        if len(i.rstrip("()")) >= 3 and i not in _NOT_IDENTIFIERS
    )
    found["numbers"] = (m.group(0) for t in texts for m in _UNIT.finditer(t))
    return found


def _rare_first(errors: list[str]) -> list[str]:
    """The error lines of a shape seen once first, then the others, fewest of their shape first
    (each group in order of appearance), when a message holds more than its share of the list:
    a type checker's or linter's one real bug says what its 77 copies of one missing attribute
    do not. A message whose error lines all fit keeps their order."""
    if len(errors) <= CATEGORIES["errors"][1]:
        return errors
    shapes = [shape(e) for e in errors]
    counts = Counter(shapes)
    order = sorted(range(len(errors)), key=lambda i: (counts[shapes[i]], i))
    return [errors[i] for i in order]


def _candidates(message: Any, dialect: Dialect = CHAT) -> dict[str, list[str]]:
    """Every fact of one message by category, in order of appearance (duplicates included)."""
    return {category: list(facts) for category, facts in _facts(message, dialect).items()}


def _first_unique(facts: Iterable[str], count: int, partial: set[str] | None = None) -> list[str]:
    """`list(dict.fromkeys(_clip(f) for f in facts))[:count]`, reading no further than needed;
    the facts that are not whole lines (see _clip_whole) are added to `partial`."""
    unique: dict[str, None] = {}
    for fact in facts:
        if len(unique) == count:
            break
        clipped, whole = _clip_whole(fact)
        unique[clipped] = None
        if not whole and partial is not None:
            partial.add(clipped)
    return list(unique)[:count] if count < 0 else list(unique)


def message_facts(
    message: Any, quotas: Quotas = CATEGORIES, dialect: Dialect = CHAT
) -> MessageFacts | None:
    """What a span's pick reads of one message: per category, its first `per_msg` distinct facts
    (clipped) and which of them are partial lines; None for junk. Read once per message, it
    serves the pick of every span that holds the message (proxy.pipeline.span_facts)."""
    if not isinstance(message, dict):
        return None
    found = _facts(message, dialect)
    out: dict[str, tuple[list[str], set[str]]] = {}
    for category, (_, per_msg) in quotas.items():
        partial: set[str] = set()
        out[category] = (_first_unique(found[category], per_msg, partial), partial)
    return out


def _select(span: list[Message], limit: int, quotas: Quotas, dialect: Dialect = CHAT) -> Selection:
    """The facts of `span` by category priority then first sight, as extract_facts picks them;
    with the category rank each was taken under (plus len(quotas) in the second round) and the
    kept facts that are partial lines."""
    state = SpanFacts(quotas, limit)
    for message in span:
        state.add(message_facts(message, quotas, dialect))
    return state.select(state.length)


def ordered(selection: Selection, quotas: Quotas = CATEGORIES) -> list[str]:
    """The picked facts in the order they are listed: see extract_facts."""
    kept, ranks, partial, any_partial = selection
    if not any_partial:
        return kept
    # (round, whole lines or names, partial): the rounds and the kinds keep their order.
    groups = [(0, c not in LINE_CATEGORIES) for c in quotas]
    groups += [(1, c not in LINE_CATEGORIES) for c in quotas]
    return sorted(kept, key=lambda f: (*groups[ranks[f]], f in partial))


def extract_facts(
    span: list[Message],
    *,
    limit: int = MAX_FACTS,
    quotas: Quotas | None = None,
    dialect: Dialect = CHAT,
) -> list[str]:
    """The facts of `span`, deduplicated, at most `limit`, by category priority then first sight.

    A fact that is a substring of a kept one is dropped (the longer one carries it), so the list
    never spends two slots on `/a/b.py` and `cat /a/b.py`.

    The list is read in order until a room runs out (the trim marker's facts, a summary's), so
    a partial line (clipped at MAX_FACT_CHARS, or cut by stage 1) comes after the whole lines
    of its kind (LINE_CATEGORIES, or the names after them): it costs the most and carries
    only part of what it says, where the same room holds two or three whole verdicts.
    """
    quotas = CATEGORIES if quotas is None else quotas
    return ordered(_select(span, limit, quotas, dialect), quotas)


def missing_facts(summary: str, facts: list[str]) -> list[str]:
    """The facts that `summary` does not contain (case-sensitive, after whitespace normalising)."""
    text = normalise(summary)
    return [f for f in facts if normalise(f) not in text]
