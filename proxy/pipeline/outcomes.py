"""Outcomes: how a command's output says it ended, read from its text.

The lines a model must still see of a command it ran earlier: test-run summaries and build
verdicts ("outcomes"), a package manager's or VCS's closing line ("successes"), error lines with
where they happened ("errors", "locations"), the exception closing a Python traceback, and a
closing status line. The toolchains covered are named by the shapes their messages share (pytest,
pip, npm, gcc/make, Go, Rust, Jest, Mocha, Maven, Gradle, MSBuild, tsc, ESLint, Python's
linters (flake8, ruff, pylint), Terraform,
Docker, git, Valgrind, unittest, CTest, RSpec and minitest, the sanitizers, CMake, Ninja, apt),
never by the content of any particular run.

Speed matters (facts are extracted from never-seen history on the request path): a text is
scanned twice for what every reported line holds (`_LINE_START_FACT`, `_ANYWHERE_FACT`) and only
those lines are read in full. tests/pipeline/test_facts_fast.py checks the result against a plain
line-by-line reading. Pure: no I/O.
"""

from __future__ import annotations

import re

from proxy.pipeline.compact.scoring import frames_source, glued_reports
from proxy.pipeline.idioms import COMPILED, Compiled
from proxy.pipeline.idioms.logs import ERRNO_MESSAGES

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
_PYTEST_E = re.compile(r"^E\s+")
_PROGRESS = re.compile(r"(?<!\s)\s+\[\s*\d+%\]$")  # from a run's start: read once

# Line breaks other than "\n" that str.splitlines() also splits at: error_lines turns them into
# "\n" first, so that its lines are exactly those of splitlines().
_ODD_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# Every line that error_lines reports, or that starts a traceback, holds one of these: a line-start
# form after the indentation (one scan over "\n" + text: the engine skips from newline to newline)
# or, anywhere in the line, one of _ERROR's names and phrases (tsc's and MSBuild's error counts,
# which _RUN_OUTCOME reads, hold "rror"). The line-start forms are grouped by their first
# character, so that at most newlines only a few are tried. Group `gofail`: go test's `--- FAIL:`
# line (not behind a `==PID==` prefix, which is group `pid`).
_LINE_START_FACT = re.compile(
    r"\n[^\S\n]*+(?P<pid>==\d+==[^\S\n]*+)?"
    r"(?:T(?:raceback \(most|est)"  # a traceback; Jest's and Vitest's Tests:
    r"|=* ?\d+ (?:passed|failed|error|skipped|deselected|xfailed|xpassed"  # _OUTCOME
    r"|passing|failing|pending|files? changed)"  # Mocha; git's, in _SUCCESS
    r"|F(?:AIL|ailed! )|B(?:UILD |uild )|\[INFO\] BUILD |test result:|Passed! |✖ \d"  # _RUN_OUTCOME
    r"|Successfully |(?:added|removed|changed|updated) \d|ok\s"  # _SUCCESS
    r"|E(?:RROR|rror|: |xpected|xecution failed)|fatal:|npm |make"  # _ERROR_START
    r"|(?P<gofail>--- FAIL:)|panic: |● |Received|e: |CONFLICT \(|Automatic merge"
    r"|Invalid |Mismatched |Conditional jump|Use of uninit|Syscall param"  # _MEMCHECK
    r"|Source and dest|\d[\d,]* bytes in|definitely lost|possibly lost|Process terminating"
    r"|SUMMARY: |OK \(|Ran \d|\d+% tests|\d+ (?:examples?|tests?|runs?), "  # _RUN_OUTCOME
    r"|\d+/\d+ Test +#|\d+ - \S+ \(|Direct leak|Indirect leak|WARNING: "  # _ERROR_START
    r"|ninja: build stopped|\d+ upgraded, |error (?:Command failed|An unexpected)"
    r"|[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(])"  # _ERROR_START: a rule code
)
# `.go:\d` written with a look-behind so that the engine tries only the positions holding a "g";
# "ked at" for "panicked at" (a "k" is rarer than a "p").
_ANYWHERE_FACT = re.compile(
    r"rror|RROR|Exception|FAILED|No such file or directory|Permission denied|command not found"
    r"|Segmentation fault|undefined reference to|ked at|FATAL\]|ITICAL\]|go:\d(?<=\.go:\d)"
    r"|ssertion (?:failed|`)|Failed (?:to |asserting)|Connection refused|Connection timed out"
    r"|Could not resolve host|Name or service not known|Temporary failure in name"
    r"|Network is unreachable|No route to host|ERR_PNPM_|ELIFECYCLE"
    r"|:\d+: [A-Z]{1,4}\d{2,4}\b"  # a linter's rule code after the location's column
    r"|BackOff|CrashLoop|ErrImagePull|OOMKilled|Evicted|NotReady|Exited \([1-9]"
    # Log levels (a JSON line's `"level":"error"` holds "rror" already).
    r"|FATAL|CRITICAL|SEVERE|PANIC"
)  # strerror's messages, in any case, are found by `_errno_lines` (3x cheaper than in here)
# The start of the line that ends a traceback: not blank, not indented, not an omission marker.
_TRACEBACK_END = re.compile(r"\n(?=\S)(?!\[\.\.\.)")


def _bare(stripped: str) -> str:
    """A stripped line without Valgrind's `==PID==` prefix (and the spaces after it)."""
    if stripped.startswith("=="):
        pid = _PID.match(stripped)
        if pid:
            return stripped[pid.end() :].strip()
    return stripped


def _fact_of(stripped: str, category: str, table: Compiled) -> bool:
    start, anywhere = table.fact_start[category], table.fact_anywhere[category]
    return bool(
        (start is not None and start.match(stripped))
        or (anywhere is not None and anywhere.search(stripped))
    )


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
    if _fact_of(stripped, "outcomes", table):
        return "outcomes", stripped
    if _fact_of(stripped, "successes", table):
        return "successes", stripped
    code = stripped.lstrip("+-> ")  # diff and quote prefixes
    if (
        _LISTING.match(line)
        or (framed and _GUTTER.match(line))
        or _fact_of(stripped, "veto", table)
        or stripped.startswith("@@")
        or (code.startswith(_CODE_START) and not _STEP.match(code))
    ):
        return None
    if _fact_of(stripped, "errors", table):
        # pytest's "E   " prefix would hide that the line repeats a FAILED summary line.
        return "errors", _PYTEST_E.sub("", _PROGRESS.sub("", stripped))
    return None


def error_lines(text: str) -> list[tuple[str, str]]:
    """(category, line) for lines that report an error or how a run ended.

    Categories: "outcomes" (test-run summary lines and the last line of each Python traceback),
    "successes" (a package manager's or VCS's closing line) and "errors". Only the lines that
    _LINE_START_FACT or _ANYWHERE_FACT find are read; after a "Traceback (most recent call last)"
    line, the next line that is not blank, indented or an omission marker is the exception.
    An error's location on the next line that is not blank (_location) is listed as "locations"
    (an error line, but never a verdict); a go test's message on the line next to its `--- FAIL:`
    line (_GO_DETAIL) is an error.
    """
    if _ODD_BREAK.search(text):
        text = _BREAKS.sub("\n", text)  # the lines of str.splitlines()
    framed = frames_source(text)
    matches = list(_LINE_START_FACT.finditer("\n" + text))
    starts = {m.start() for m in matches}
    search, find = _ANYWHERE_FACT.search, text.find
    details: set[int] = set()  # the starts of the lines next to a `--- FAIL:` line
    for start in (m.start() for m in matches if m.group("gofail") and not m.group("pid")):
        if start:
            details.add(text.rfind("\n", 0, start - 1) + 1)
        end = find("\n", start)
        if end >= 0:
            details.add(end + 1)
    starts |= details
    pos = 0
    while (m := search(text, pos)) is not None:
        starts.add(text.rfind("\n", 0, m.start()) + 1)
        pos = find("\n", m.end()) + 1
        if not pos:
            break
    starts |= _errno_lines(text)
    starts.update(glued_reports(text) if "==" in text else ())  # read from their `==PID==` on
    found: list[tuple[str, str]] = []
    read = 0  # lines that start before this were read as part of a traceback
    for start in sorted(starts):
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
            fact = _error_line(line, framed)
            if fact:
                found.append(fact)
                if fact[0] == "errors" and end >= 0:
                    location = _location(text, end + 1)
                    if location:
                        found.append(("locations", location[0]))
                        read = location[1]
    return found


def _errno_lines(text: str) -> set[int]:
    """The starts of the lines holding one of strerror's messages, in any case: one
    `str.find` scan of the lowercased text per message. An alternative per message in
    _ANYWHERE_FACT would let almost any character start a match (3x slower scans)."""
    low = text.lower()
    if len(low) != len(text):  # a character whose lowercase is longer ("İ"): go line by line
        out, start = set(), 0
        for line in text.split("\n"):
            lowered = line.lower()
            if any(m in lowered for m in ERRNO_MESSAGES):
                out.add(start)
            start += len(line) + 1
        return out
    out = set()
    for message in ERRNO_MESSAGES:
        pos = low.find(message)
        while pos >= 0:
            out.add(text.rfind("\n", 0, pos) + 1)
            end = low.find("\n", pos)
            if end < 0:
                break
            pos = low.find(message, end)
    return out


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
            or _fact_of(stripped, "veto", COMPILED)
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
