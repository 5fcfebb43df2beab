"""Outcomes: how a command's output says it ended, read from its text.

The lines a model must still see of a command it ran earlier: test-run summaries and build
verdicts ("outcomes"), a package manager's or VCS's closing line ("successes"), error lines with
where they happened ("errors", "locations"), the exception closing a Python traceback, and a
closing status line. The toolchains covered are named by the shapes their messages share (pytest,
pip, npm, gcc/make, Go, Rust, Jest, Mocha, Maven, Gradle, MSBuild, tsc, ESLint, Python's
linters (flake8, ruff, pylint), Terraform,
Docker, git, Valgrind, unittest, CTest, RSpec and minitest, the sanitizers, CMake, Ninja, apt),
never by the content of any particular run.

The idioms are `proxy.pipeline.idioms`' records with a `fact`. Speed matters (facts are
extracted from never-seen history on the request path): a text is scanned twice for what every
reported line holds (`_candidates`) and only those lines are read in full.
tests/pipeline/test_facts_fast.py checks the result against a plain line-by-line reading.
Pure: no I/O.
"""

from __future__ import annotations

import re

from proxy.pipeline.compact.scoring import frames_source, glued_reports
from proxy.pipeline.idioms import COMPILED, Compiled

_PID = re.compile(r"^==\d+==")  # Valgrind's and the sanitizers' prefix of every line of theirs
# Trailing lines that say nothing about how a command went: exit-status footers added by agent
# frameworks, package managers' upgrade notices, shrink-proxy's own omission markers.
_FOOTER = re.compile(
    r"^\[?(?:exit(?:ed)?(?: with)? ?(?:code|status)|return ?code|process exited with code)"
    r"\s*[:=]?\s*-?\d+\]?\.?$"
    r"|^\[notice\]|^npm notice\b|^\[\.\.\. .* omitted by shrink-proxy \.\.\.\]$",
    re.I,
)
_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*[A-Za-z][.,:;!?]?")  # a word of prose, not a path
_NOT_STATUS = re.compile(
    r"^(?:[-+|@<>{}\[\]()\"'#]|[dlcbps-][rwxsStT-]{9})"
)  # diffs, tables, code, ls -l
_LISTING = re.compile(r"^\s*\d+\t")  # `cat -n` output: source code, not an error report
# Source quoted behind a numbered gutter under a diagnostic (gcc, clang, rustc, ruff; Jest's and
# Babel's `>` frames): code, not an error report. Only in a text holding the gutter's bare lines
# (`   |`, `   |     ^~~~`): a table's numbered rows (psql) look the same otherwise.
_GUTTER = re.compile(r"^\s*(?:>\s*)?\d+ +\|")
_CODE_START = ("raise ", "except ", "class ", "def ", "import ", "from ", "#", "//", "assert ")
_STEP = re.compile(r"^#\d+ ")  # BuildKit's step prefix (#12 4.211 ...), not a comment
# Where an error happened, on the line after it (blank lines and Terraform's box edge between):
# rustc's `--> file:line:col`, a JS/Java/.NET stack frame, Terraform's `on main.tf line 48`.
_LOCATION = re.compile(
    r"^(?:--> \S+:\d+|at \S.*(?:\.\w+:\d+(?::\d+)?\)?|:line \d+)$|on \S+ line \d+\b)"
)
_BOX = "│"  # Terraform draws a box edge before each line of a diagnostic
# go test: a failing test's own message (`    codec_test.go:118: got 3, want 4`), on the line
# just above its `--- FAIL:` line (go test -v) or just below it (_LINE_START_FACT's group 1).
_GO_DETAIL = re.compile(r"^\s+[\w.-]+\.go:\d+: \S")
# Matched where a line starts (no `==PID==`); from a blank run's start only, so a search too
# reads each run once.
_GO_FAIL = re.compile(r"(?<![^\S\n])[^\S\n]*+--- FAIL:")
_PYTEST_E = re.compile(r"^E\s+")
_PROGRESS = re.compile(r"(?<!\s)\s+\[\s*\d+%\]$")  # from a run's start: read once

# Line breaks other than "\n" that str.splitlines() also splits at: error_lines turns them into
# "\n" first, so that its lines are exactly those of splitlines().
_ODD_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# The start of the line that ends a traceback: not blank, not indented, not an omission marker.
_TRACEBACK_END = re.compile(r"\n(?=\S)(?!\[\.\.\.)")


def _bare(stripped: str) -> str:
    """A stripped line without Valgrind's `==PID==` prefix (and the spaces after it)."""
    if stripped.startswith("=="):
        pid = _PID.match(stripped)
        if pid:
            return stripped[pid.end() :].strip()
    return stripped


def _fact_of(stripped: str, low: str, category: str, table: Compiled = COMPILED) -> bool:
    start = table.fact_start[category]
    if start is not None and start.match(stripped):
        return True
    return any(r.fact == category and r.matches(stripped, low) for r in table.fact_rules)


def _error_line(
    line: str, framed: bool = False, table: Compiled = COMPILED
) -> tuple[str, str] | None:
    """(category, line) when one line, outside a traceback, reports an error or how a run ended.
    `framed`: the text quotes source behind a gutter (`frames_source`)."""
    stripped = _bare(line.strip())
    for capture in table.fact_captures:
        outcome = capture.match(stripped)
        if outcome:
            return "outcomes", outcome.group("fact")
    low = stripped.lower()
    if _fact_of(stripped, low, "outcomes", table):
        return "outcomes", stripped
    if _fact_of(stripped, low, "successes", table):
        return "successes", stripped
    code = stripped.lstrip("+-> ")  # diff and quote prefixes
    if (
        _LISTING.match(line)
        or (framed and _GUTTER.match(line))
        or _fact_of(stripped, low, "veto", table)
        or stripped.startswith("@@")
        or (code.startswith(_CODE_START) and not _STEP.match(code))
    ):
        return None
    if _fact_of(stripped, low, "errors", table):
        # pytest's "E   " prefix would hide that the line repeats a FAILED summary line.
        return "errors", _PYTEST_E.sub("", _PROGRESS.sub("", stripped))
    return None


def _candidates(text: str, table: Compiled) -> tuple[list[int], set[int]]:
    """The starts of the lines `error_lines` must read, sorted, and those next to a go test's
    `--- FAIL:` line: each line that starts like a fact idiom (one scan over "\n" + text, the
    engine skipping from newline to newline), that holds a trigger of one found anywhere (one
    Aho-Corasick scan of the lowercased text), or starts a traceback; and each Valgrind report
    glued to half a line of the program's output, read from its `==PID==` on."""
    starts = {m.start() for m in table.fact_scan.finditer("\n" + text)}
    details: set[int] = set()
    find = text.find
    at = find("--- FAIL:")
    while at >= 0:  # go test's failed test: its message is on the line above or below
        start = text.rfind("\n", 0, at) + 1
        if _GO_FAIL.match(text, start):
            starts.add(start)
            if start:
                details.add(text.rfind("\n", 0, start - 1) + 1)
            end = find("\n", at)
            if end >= 0:
                details.add(end + 1)
        at = find("--- FAIL:", at + 9)
    starts |= details
    low = text.lower()
    if len(low) == len(text):
        for end, _ in table.fact_automaton.iter(low):
            starts.add(text.rfind("\n", 0, end) + 1)
    else:  # a character whose lowercase is longer ("İ"): line by line
        line_starts = 0
        for line in text.split("\n"):
            lowered = line.lower()
            if any(True for _ in table.fact_automaton.iter(lowered)):
                starts.add(line_starts)
            line_starts += len(line) + 1
    starts.update(glued_reports(text) if "==" in text else ())
    return sorted(starts), details


def error_lines(text: str, table: Compiled = COMPILED) -> list[tuple[str, str]]:
    """(category, line) for lines that report an error or how a run ended.

    Categories: "outcomes" (test-run summary lines and the last line of each Python traceback),
    "successes" (a package manager's or VCS's closing line) and "errors". Only the lines that
    `_candidates` finds are read; after a "Traceback (most recent call last)" line, the next
    line that is not blank, indented or an omission marker is the exception. An error's
    location on the next line that is not blank (_location) is listed as "locations" (an error
    line, but never a verdict); a go test's message on the line next to its `--- FAIL:` line
    (_GO_DETAIL) is an error.
    """
    if _ODD_BREAK.search(text):
        text = _BREAKS.sub("\n", text)  # the lines of str.splitlines()
    framed = frames_source(text)
    starts, details = _candidates(text, table)
    find = text.find
    found: list[tuple[str, str]] = []
    read = 0  # lines that start before this were read as part of a traceback
    for start in starts:
        if start < read:
            continue
        end = find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip().startswith("Traceback (most recent call last)"):
            last = None if end < 0 else _TRACEBACK_END.search(text, end)
            if last is None:
                break
            end = find("\n", last.end())
            found.append(("outcomes", text[last.end() : None if end < 0 else end].strip()))
            if end < 0:
                break
            read = end + 1
        elif start in details and _GO_DETAIL.match(line):
            found.append(("errors", line.strip()))
        else:
            fact = _error_line(line, framed, table)
            if fact:
                found.append(fact)
                if fact[0] == "errors" and end >= 0:
                    location = _location(text, end + 1)
                    if location:
                        found.append(("locations", location[0]))
                        read = location[1]
    return found


def _location(text: str, start: int) -> tuple[str, int] | None:
    """(line, where the next line starts) when the first line from `start` that is not blank
    (nor only Terraform's box edge) says where the error on the line before `start` happened."""
    find = text.find
    while True:
        end = find("\n", start)
        stripped = _bare((text[start:] if end < 0 else text[start:end]).strip())
        if stripped.lstrip(_BOX).strip():
            if not _LOCATION.match(stripped.lstrip(_BOX).strip()):
                return None
            return stripped, len(text) + 1 if end < 0 else end + 1
        if end < 0:
            return None
        start = end + 1


def status_line(text: str) -> str | None:
    """The last line of a command's output when it reads like a status ("151 CA certificates
    loaded", "No broken requirements found."): footers, notices and bare punctuation skipped;
    source listings, `ls -l` rows and single tokens are not statuses."""
    lines = text.splitlines()
    filled = 0
    for line in lines:
        if line.strip():
            filled += 1
            if filled == 2:
                break
    else:
        return None  # a one-line result is a confirmation ("Edited x.py"), not a run's status
    for line in reversed(lines[-12:]):
        stripped = line.strip()
        if (
            not stripped
            or _FOOTER.search(stripped)
            or _fact_of(stripped, stripped.lower(), "veto", COMPILED)
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


def last_verdict(found: list[tuple[str, str]]) -> str | None:
    """The verdict among `error_lines`' findings: the last outcome, else the last error."""
    outcome = error = None
    for category, line in found:
        if category == "outcomes":
            outcome = line
        elif category == "errors":
            error = line
    return outcome or error


def verdict(text: str) -> str | None:
    """How one command's output ended: its last outcome line, else its last error line."""
    return last_verdict(error_lines(text))
