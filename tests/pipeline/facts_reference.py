"""A frozen copy of proxy/pipeline/facts.py from before its speed-up: the fast one must match it.

tests/pipeline/test_facts_fast.py asserts the live module gives the same output. This copy is the
plain, line-by-line statement of what facts are; a deliberate change to what facts.py extracts is
made here first, the same way, then in the fast module. Changed since the copy: other toolchains'
run outcomes (_RUN_OUTCOME), errors (_ERROR's later forms, go test's messages next to `--- FAIL:`)
and the locations on the line after an error (_LOCATION); BuildKit's `#12 ` is not a comment;
a tool result's JSON failures (proxy.pipeline.json_outcomes) are error lines after its own;
Valgrind's Memcheck errors and ERROR SUMMARY, read after its `==PID==` line prefix; unittest's,
CTest's, RSpec's and the sanitizers' failures and summaries; failed assertions; CMake's and
Ninja's errors and verdicts, apt's plan; yarn's, pnpm's, PHPUnit's, Docker's and network errors;
linters' diagnostics with a rule code; failed states in kubectl's and docker's tables; an
application log's error level; GitHub Actions' error annotations; strerror's messages in any
case; npm's pointers to its log and report files (and the report's path) are not errors; a
Valgrind report line glued to half a line of the program's output, read as its own line; a
message's error lines of a shape seen once come first (_rare_first); a `git log` gives no error
lines, verdict or status.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from proxy.pipeline.compact.outline import is_commit_log
from proxy.pipeline.compact.scoring import shape
from proxy.pipeline.idioms.logs import ERRNO_MESSAGES
from proxy.pipeline.json_outcomes import failure_lines
from proxy.pipeline.types import Message

MAX_FACTS = 40
_NPM_POINTER = (
    r"npm (?:ERR!|error) (?:(?:A complete log of this run|For a full report see)\b|/\S*$)"
)
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

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]}]+")
_PATH = re.compile(
    r"(?<![\w/.~@:-])"
    r"(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+"  # a/b, /a/b, ~/a, ./a, ../a
)
_EXT = (
    "py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|toml|ya?ml|cfg|ini|conf|txt|md|rst|c|h|cc|"
    "cpp|hpp|go|rs|java|kt|rb|php|sh|bash|lock|html|css|scss|sql|xml|gradle|env|log|csv|dockerfile"
)
_FILENAME = re.compile(rf"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:{_EXT})(?![\w/])")
_NAMED_FILES = re.compile(r"(?<![\w/.-])(?:Makefile|Dockerfile|Containerfile|Procfile)(?![\w/.])")
_DOLLAR = re.compile(r"^\s*\$ +(\S.*)$", re.M)
_VERSION = re.compile(
    r"(?<![\w.])(?:[A-Za-z][\w.-]*(?:==|>=|<=|~=|!=|@)v?\d+(?:\.\d+)+[\w.+-]*"  # pkg==1.2.3
    r"|v\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?"  # v1.2.3
    r"|\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc|dev|post|alpha|beta|pre)\d*)?)(?![\w.])"  # 1.2.3rc1
)
_BACKTICK = re.compile(r"`([A-Za-z_][\w.]*(?:\(\))?)`")
_DEF = re.compile(r"\b(?:def|class|function|func|fn)\s+([A-Za-z_]\w*)")
_UNIT = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:ms|s|sec|seconds?|minutes?|min|h|hours?|[KMGT]i?B|bytes|%"
    r"|tokens|lines|files|tests|passed|failed|errors?|warnings?|skipped)(?![\w%])"
)
_ERROR = re.compile(
    r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b(?::(?!:)|$)"  # ValueError: ...
    r"|\bFAILED\b|^ERROR\b|\b(?:fatal )?(?:error|Error|ERROR)(?:\[\w+\])?:(?!:)"  # not error::X
    r"|^Error\b|^fatal:|^E: "
    r"|^npm (?:ERR!|error) +\S|^make(?:\[\d+\])?: \*\*\*"
    r"|\b(?:No such file or directory|Permission denied|command not found|Segmentation fault"
    r"|undefined reference to)\b"
    # Other toolchains' failure lines, from their documented formats:
    r"|^--- FAIL: |^FAIL\s+\S|^panic: |\bpanicked at\b"  # go test's, Jest's FAIL; Go, Rust panics
    r"|^\S*\.go:\d+:\d+: \S"  # go build, go vet: file.go:12:5: message
    r"|^● (?!Console$)\S|^(?:Expected|Received)(?: \w+)?: +\S"  # Jest: failing test, its values
    r"|\[(?:ERROR|FATAL|CRITICAL)\] *\S"  # bracketed log levels (Maven, many loggers)
    r"|\berror [A-Z]{1,4}\d+ ?:"  # error TS2322:, error CS0103:, error C2065:, error MSB3073:
    r"|^\d+:\d+\s+error\s+\S"  # ESLint's stylish format: 77:9  error  message  rule
    # A linter's rule code (flake8, ruff, pylint) after a path (a letter or a dot: not a time).
    r"|^(?:[A-Za-z]:)?[^\s:]*[A-Za-z_./][^\s:]*:\d+:\d+: [A-Z]{1,4}\d{2,4}\b"
    r"|^[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(]"  # ruff: the code first
    r"|^e: \S|^Execution failed for \S"  # Kotlin compiler, Gradle
    r"|^CONFLICT \([^)]*\): \S|^Automatic merge failed\b"  # git merge, rebase, cherry-pick
    r"|^FAIL: \S"  # unittest, Django
    r"|^\d+/\d+ Test +#\d+: \S+ .*\*\*\*\w|^\d+ - \S+ \((?:Failed|Timeout|Not Run|Exception"
    r"|SEGFAULT|Child aborted|OTHER_FAULT)\)$"  # CTest
    r"|^(?:Direct|Indirect) leak of \d|^WARNING: \w*Sanitizer: "  # LeakSanitizer, ThreadSanitizer
    r"|^CMake Error\b|^error (?:Command failed|An unexpected error)|^(?:FAILURES|ERRORS)!$"
    r"|\bFailed (?:to \w|asserting that\b)|\bError response from daemon\b"
    r"|\b(?:Connection refused|Connection timed out|Could not resolve host"
    r"|Name or service not known|Temporary failure in name resolution|Network is unreachable"
    r"|No route to host)\b"
    r"|\bERR_PNPM_\w|\bELIFECYCLE\b"
    # A failed state in a status table: kubectl get pods / nodes, docker ps.
    r"|\b\w*BackOff\b|\bCrashLoop|\bErrImagePull\b|\bOOMKilled\b|\bEvicted\b|\bNotReady\b"
    r"|\bExited \([1-9]\d*\)"
    # An application log's error level, a word of its own, or a JSON log line's level.
    r"|(?:^|[\s\[|(])(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)[\s:\]|)]+\S"
    r"|\"(?:level|severity|lvl)\"\s*:\s*\"(?i:error|fatal|critical|panic)\""
    r"|##\[error\]\S|::error(?: [^:\n]*)?::\S"  # GitHub Actions' error annotations
    # A failed system call's message (strerror), in any case: Go and Node print it lowercase.
    r"|\b(?i:" + "|".join(map(re.escape, ERRNO_MESSAGES)) + r")\b"
    r"|\b(?:assertion failed|Assertion `[^\n]*' failed)"  # test macros; glibc's assert()
    # Valgrind's Memcheck (after its `==PID==` prefix), and a leak summary that found a leak.
    r"|^(?:Invalid (?:read|write) of size \d|Invalid (?:free|realloc)\(\)"
    r"|Mismatched (?:free|delete)|Conditional jump or move depends on uninitialised"
    r"|Use of uninitialised value"
    r"|Syscall param \S+ points to uninitialised|Source and destination overlap in"
    r"|[\d,]+ bytes in [\d,]+ blocks are (?:definitely|possibly) lost"
    r"|Process terminating with default action)"
)
_OUTCOME = re.compile(
    r"^=* ?(\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.* in [\d.]+s\b.*?)"
    r"(?: =+)?$"
)
# How a run ended, in the words of other test runners and build tools (whole lines).
_RUN_OUTCOME = re.compile(
    r"^(?:Test Suites|Test Files|Tests):?\s+\d+ (?:failed|passed)\b"  # Jest, Vitest
    r"|^\d+ (?:passing|failing|pending)\b"  # Mocha
    r"|^FAIL\s+\S+\s+(?:\d+(?:\.\d+)?s|\[[\w ]+\])"  # go test: FAIL <package> 0.41s
    r"|^test result: (?:ok|FAILED)\."  # cargo test
    r"|^(?:Failed|Passed)! +- Failed: +\d"  # dotnet test
    r"|^(?:\[INFO\] )?BUILD (?:SUCCESS(?:FUL)?|FAILURE|FAILED)\b"  # Maven, Gradle, Ant
    r"|^Build (?:succeeded|FAILED|failed)(?:\.| with \d+ \w+\(s\).*| in [\d.]+s)?$"  # MSBuild
    r"|^\d+ Error\(s\)$"  # MSBuild
    r"|^(?:\[[\d:]+(?: [AP]M)?\] )?Found \d+ errors?\b"  # tsc, tsc --watch
    r"|^✖ \d+ problems?\b"  # ESLint
    r"|^ERROR SUMMARY: \d+ errors? from \d+ contexts?\b"  # Valgrind, and its leak summary's
    r"|^(?:definitely|possibly) lost: [1-9]"  # lines when it found a leak
    r"|^SUMMARY: \w*Sanitizer: \S"  # AddressSanitizer, UBSan, TSan, LeakSanitizer
    r"|^(?:FAILED|OK) \((?:failures|errors|skipped)=\d+"  # unittest
    r"|^Ran \d+ tests? in [\d.]+s$"  # unittest
    r"|^\d+% tests passed, \d+ tests? failed out of \d+"  # CTest
    r"|^\d+ (?:examples?|tests?|runs?), \d+ (?:failures?|assertions?)\b"  # RSpec, ExUnit, minitest
    r"|^-- Configuring incomplete, errors occurred!|^ninja: build stopped: "  # CMake, Ninja
    r"|^Tests: \d+, Assertions: \d+"  # PHPUnit
)
_SUCCESS = re.compile(
    r"^(?:Successfully \w+ \S"  # pip, docker, setuptools: Successfully installed/built/tagged ...
    r"|(?:added|removed|changed|updated) \d+ packages?\b"  # npm
    r"|\d+ files? changed\b"  # git
    r"|\d+ upgraded, \d+ newly installed\b"  # apt
    r"|ok\s+\S+\s+(?:\d+(?:\.\d+)?s|\(cached\)))"  # go test: ok <package> 0.03s
)
# Trailing lines that say nothing about how a command went: exit-status footers added by agent
# frameworks, package managers' upgrade notices, shrink-proxy's own omission markers.
_FOOTER = re.compile(
    r"^\[?(?:exit(?:ed)?(?: with)? ?(?:code|status)|return ?code|process exited with code)"
    r"\s*[:=]?\s*-?\d+\]?\.?$"
    r"|^\[notice\]|^npm notice\b|^\[\.\.\. .* omitted by shrink-proxy \.\.\.\]$",
    re.I,
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z][.,:;!?]?")  # a word of prose, not a path
_NOT_STATUS = re.compile(
    r"[-+|@<>{}\[\]()\"'#]|[dlcbps-][rwxsStT-]{9}"
)  # diffs, tables, code, ls -l
_LISTING = re.compile(r"^\s*\d+\t")  # `cat -n` output: source code, not an error report
# Source quoted behind a numbered gutter under a diagnostic (gcc, clang, rustc, ruff; Jest's and
# Babel's `>` frames): code, not an error report. Only in a text holding the gutter's bare lines
# (`   |`, `   |     ^~~~`): a table's numbered rows (psql) look the same otherwise.
_GUTTER = re.compile(r"^\s*(?:>\s*)?\d+ +\|")
_BARE_GUTTER = re.compile(r"^[ \t]+\|[ \t]*(?:[\^~-][^\n]*)?$", re.MULTILINE)
_NOT_IDENTIFIERS = frozenset({"None", "True", "False", "null", "true", "false", "self", "cls"})
_CODE_START = ("raise ", "except ", "class ", "def ", "import ", "from ", "#", "//", "assert ")
_STEP = re.compile(r"#\d+ ")  # BuildKit's step prefix (#12 4.211 ...), not a comment
# Where an error happened, on the line after it (blank lines and Terraform's box edge between):
# rustc's `--> file:line:col`, a JS/Java/.NET stack frame, Terraform's `on main.tf line 48`.
_LOCATION = re.compile(r"--> \S+:\d+|at \S.*(?:\.\w+:\d+(?::\d+)?\)?|:line \d+)$|on \S+ line \d+\b")
_BOX = "│"  # Terraform draws a box edge before each line of a diagnostic
# go test: a failing test's own message (`    codec_test.go:118: got 3, want 4`), on the line
# just above its `--- FAIL:` line (go test -v) or just below it.
_GO_FAIL = re.compile(r"\s*--- FAIL:")
_GO_DETAIL = re.compile(r"\s+[\w.-]+\.go:\d+: \S")
_PYTEST_E = re.compile(r"^E\s+")
_PROGRESS = re.compile(r"\s+\[\s*\d+%\]$")
_NUMERIC = re.compile(r"[\d.,:]+")
_TRAILING = ".,:;!?)]}'\"`"


def normalise(text: str) -> str:
    """Collapse runs of whitespace into one space: facts are compared this way."""
    return " ".join(text.split())


def _clip(text: str) -> str:
    """Normalise and bound a fact; a long one keeps its head, cut at a space when one is near."""
    text = normalise(text)
    if len(text) <= MAX_FACT_CHARS:
        return text
    head = text[:MAX_FACT_CHARS]
    space = head.rfind(" ")
    return head[:space] if space > MAX_FACT_CHARS * 0.6 else head


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
        stripped = _bare(stripped)
        if not stripped:
            continue
        outcome = _OUTCOME.match(stripped)
        if outcome:
            yield "outcomes", outcome.group(1)
            continue
        if _RUN_OUTCOME.match(stripped):
            yield "outcomes", stripped
            continue
        if _SUCCESS.match(stripped):
            yield "successes", stripped
            continue
        code = stripped.lstrip("+-> ")  # diff and quote prefixes
        if (
            _LISTING.match(line)
            or (framed and _GUTTER.match(line))
            or re.match(_NPM_POINTER, stripped)
            or stripped.startswith("@@")
            or (code.startswith(_CODE_START) and not _STEP.match(code))
        ):
            continue
        if _ERROR.search(stripped):
            # pytest's "E   " prefix would hide that the line repeats a FAILED summary line.
            yield "errors", _PYTEST_E.sub("", _PROGRESS.sub("", stripped))
            after_error = True


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
            or re.match(_NPM_POINTER, stripped)
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


def _candidates(message: Any) -> dict[str, list[str]]:
    """Every fact of one message by category, in order of appearance (duplicates included)."""
    found: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    texts = [_scan_window(t) for t in _texts(message)]
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
