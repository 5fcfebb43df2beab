"""Outline: the map of a source file's or a diff's omitted middle, listed under its marker.

A `read_file` of a 600-line module cut to its head and tail leaves a model with the imports and
the last function: it cannot tell what the file defines, or where. The lines that declare
something (a function, class, method, type, module-level name) are the file's map; listed
verbatim in the marker (with their `cat -n` numbers when the dump has them), they let the model
ask for exactly the range it needs. They are recognised by shapes the mainstream languages share
(Python, JS/TS, Go, Rust, Ruby, C-family and JVM methods), never by a file's content; a text
with fewer than MIN_DEFINITIONS such lines is not treated as code.

A unified diff (`git diff`, `git show`) is code too, not a log: its map is its file headers
(`diff --git a/x b/x`) and hunk headers (`@@ -12,7 +12,9 @@ def f`), which say which files and
functions the omitted part changes. A `git log` is a list of commits, not a log either: its map
is each commit's hash line and subject (and with `-p`, its diff's headers). So is `grep -rn`
output (`path:line:text` on every line): a match that mentions "error" is no error, and its map
is the first match in each file. Pure.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

from proxy.pipeline.compact import reports

MIN_DEFINITIONS = 3
MAX_DENSITY = 0.3  # more definitions per line than this: a table of names, not a module
SHARE = 0.35  # of a budget, at most, for the listed definitions and their two marker lines
# One scan over the text (after a newline put in front, so the engine skips from line to line in
# C): an optional `cat -n` number, then a definition, indented or not, or a module-level one at
# column 0. `[^\S\n]` is a blank that stays on its line; the possessive `++` keeps the engine from
# retrying every shorter indentation of a line that defines nothing.
_B = r"[^\S\n]"
_DEFINITION = (
    rf"(?:async{_B}+)?def{_B}+[\w.]+[?!]?{_B}*(?:[(\[]|$)"  # Python, Ruby
    rf"|(?:export{_B}+(?:default{_B}+)?)?(?:async{_B}+)?function\*?{_B}*\w+{_B}*[(<]"  # JS/TS
    # A class or type of any language, behind its modifiers.
    rf"|(?:(?:export|default|public|private|protected|internal|abstract|final|static|sealed"
    rf"|open|data|partial){_B}+)*(?:class|record|object){_B}+\w+"
    rf"|(?:export{_B}+)?(?:declare{_B}+)?(?:interface|enum|type){_B}+\w+{_B}*[<={{]"  # TS
    rf"|(?:export{_B}+)?(?:const|let|var){_B}+\w+{_B}*(?::[^=\n]+)?={_B}*(?:async{_B}+)?"
    rf"(?:\([^)\n]*\)|\w+){_B}*(?::[^=\n]+)?=>"  # an arrow function bound to a name
    rf"|func{_B}+(?:\([^)\n]*\){_B}*)?\w+{_B}*[(\[]|type{_B}+\w+{_B}+(?:struct|interface)\b"  # Go
    rf"|(?:pub(?:\([\w:]+\))?{_B}+)?(?:(?:async|unsafe|const){_B}+)*"
    rf"(?:fn|struct|enum|trait|impl|mod)\b[ \t<]"  # Rust
    rf"|module{_B}+[A-Z][\w:]*{_B}*$"  # Ruby
    # A JVM/.NET method or a C function definition: modifiers or a type, a name, a parameter
    # list that is not closed by `;` (a declaration or a call ends with one).
    # (the modifiers read once, possessive: a line of them, retried at every split, was cubic)
    rf"|(?:(?:public|private|protected|internal|static|final|abstract|override|virtual|async"
    rf"|synchronized|inline|extern|const){_B}++)++[\w<>\[\],.?* ]+?{_B}+\**\w+{_B}*\([^;\n]*$"
)
# At column 0 only: a module-level name bound (`__version__ = "1.17.0"`, `X: int = 3`), or a C
# function defined (`static int rb_push(struct rb *r, int v)`), not a statement.
_TOP = (
    rf"[A-Za-z_][\w.]*{_B}*(?::{_B}*[^=\n]+)?=(?!=){_B}*\S"
    rf"|(?!(?:if|for|while|switch|return|else|do|case|catch)\b)"
    # Words and the blanks or stars between them read possessively: a star belongs to the word
    # before it, so `a*a*a*a` splits one way only (it split every way, in exponential time).
    rf"(?P<function>(?:[A-Za-z_][\w*]*+[ \t*]++)+\**\w+{_B}*\([^;\n]*$)"
)
# Every form of _DEFINITION starts with a lowercase keyword among these letters: a line that
# starts otherwise is passed over without trying each form (3x faster on source files).
_KEYWORD = "(?=[a-fil-pr-v])"
_SCAN = re.compile(
    rf"\n(?:{_B}*+\d++\t)?(?:(?P<indent>[ \t]++){_KEYWORD}(?:{_DEFINITION})"
    rf"|{_KEYWORD}(?P<top>{_DEFINITION})|{_TOP})",
    re.MULTILINE,
)


# A line shaped like code in most languages: indented, a comment, decorator or docstring, a
# statement keyword or a closing bracket at its start, or ending like a statement or a block
# opener does (tested with `str.endswith`: a regex reaching for the end of every line costs 4x).
_CODE_START = re.compile(
    r"^(?:[ \t]+\S|#|//|/\*|\*|@|\"\"\"|'''|[}\])]"
    r"|(?:import|from|return|if|else|elif|for|while|try|except|catch|finally|with|package|use"
    r"|using|include|const|let|var|pub|fn|func|class|def|struct|enum|interface|type|raise|throw"
    r"|async|export|static|public|private|protected|namespace|require|module|end)\b)"
)
_CODE_ENDS = tuple("{}:;,([)=")
# The definitions that open with a keyword (`_DEFINITION`), indented or not: unlike `_TOP`'s
# bare `name = value` and `words (...)` forms, log lines do not take these shapes by chance.
_KEYWORD_DEFINITION = re.compile(
    rf"\n(?:{_B}*+\d++\t)?[ \t]*+{_KEYWORD}(?:{_DEFINITION})", re.MULTILINE
)
# A C function defined at column 0 (`_TOP`'s form, or GNU style with its type on the line
# before) whose body opens on its line or the next: without the brace, `Collecting x (from y)`
# in a pip log would pass for one. Possessive, so a line of words is not retried word by word.
_C_FUNCTION = re.compile(
    r"\n(?!(?:if|for|while|switch|return|else|do|case|catch)\b)(?:[A-Za-z_][\w*]*+[ \t*]++)*+"
    rf"\**\w++{_B}*\([^;{{\n]*+(?:\{{{_B}*$|\n\{{)",
    re.MULTILINE,
)
# What every such definition holds: a closing parenthesis, then a brace at the line's end or
# alone on the next line. Found 5-10x faster than the definitions themselves.
_BLOCK_OPENS = re.compile(r"\)[^\S\n]*(?:\n\{|\{[^\S\n]*\n)")
CODE_SHARE = 0.8  # of the non-blank lines, at least, shaped like code
SIGNAL_SHARE = 0.06  # of the non-blank lines, at most, where a log's signals start
SAMPLE = 400  # lines, evenly spaced, the shares are measured on: a share needs no more


def is_source(text: str, lines: Sequence[str], signals: Callable[[str], int]) -> bool:
    """Source code without line numbers: CODE_SHARE of the lines shaped like code, at most
    SIGNAL_SHARE starting like a log's verdicts, errors, assertion details or traceback frames
    (`signals` counts those; a docstring's list of the exceptions raised is the few it allows),
    and at least MIN_DEFINITIONS keyword or C definitions, at most MAX_DENSITY per line.

    A pytest failure report quotes test functions among its `E` and `>` lines, and with
    `--tb=long` and `--showlocals` whole library functions and their locals, far more lines
    than its own: its frames (`reports`) make it a log. A pip log's `Collecting x (from y)`
    lines look like C definitions but open no block: a log too.
    The shares are read off every n-th line (a function of the text alone, like the rest), so
    a long log costs the scans for definitions only when it is shaped like code.
    """
    every = lines[:: max(1, len(lines) // SAMPLE)]
    sample = [line for line in every if line.strip()]
    if not sample:
        return False
    shaped = sum(
        1 for line in sample if _CODE_START.match(line) or line.rstrip().endswith(_CODE_ENDS)
    )
    if shaped < CODE_SHARE * len(sample):
        return False
    if signals("\n".join(sample)) > SIGNAL_SHARE * len(sample):
        return False
    if reports.frames(text, lines):  # a test report quoting the code it ran is a log
        return False
    whole = "\n" + text
    starts = {m.start() for m in _KEYWORD_DEFINITION.finditer(whole)}
    if len(_BLOCK_OPENS.findall(whole)) >= MIN_DEFINITIONS:
        # Lines, not matches: `export function f(x) {` is both forms.
        starts.update(m.start() for m in _C_FUNCTION.finditer(whole))
    nonblank = len(lines) * len(sample) / len(every)
    return MIN_DEFINITIONS <= len(starts) <= MAX_DENSITY * nonblank


# Markdown and reStructuredText-style documents (a README, a CHANGELOG, docs): their map is their
# headings. ATX (`## Usage`) or setext (a title underlined with three or more `=` or `-`, no
# spaces: a diff's removed blank line `-` is no underline).
_HEADING_HINT = re.compile(r"\n(?:#{1,6}[ \t]+\S|(?:={3,}|-{3,})[ \t]*$)", re.MULTILINE)
_ATX = re.compile(r"^(#{1,6})[ \t]+\S")
_UNDERLINE = re.compile(r"^(?:={3,}|-{3,})[ \t]*")
_FENCES = ("```", "~~~")


def _outside_fences(lines: Sequence[str]) -> list[int]:
    """Indices of the lines outside fenced code blocks (```` ``` ```` or `~~~`), fences
    excluded: a shell comment or an error message quoted in a block is the doc's example."""
    out: list[int] = []
    fence = ""
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(_FENCES):
            if not fence:
                fence = stripped[:3]
            elif stripped.startswith(fence):
                fence = ""
            continue
        if not fence:
            out.append(i)
    return out


def headings(lines: Sequence[str], outside: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """(index, rank) of each heading outside fenced code blocks; the rank is its level less
    one (setext: `=` is 1, `-` is 2). `outside`: `_outside_fences(lines)`, when known."""
    found: list[tuple[int, int]] = []
    previous = -2  # the index of the last line outside a fence
    for i in _outside_fences(lines) if outside is None else outside:
        line = lines[i]
        atx = _ATX.match(line)
        if atx:
            found.append((i, len(atx.group(1)) - 1))
        elif (
            previous == i - 1
            and lines[previous].strip()
            and _UNDERLINE.fullmatch(line)
            and not _ATX.match(lines[previous])
            and not _UNDERLINE.fullmatch(lines[previous])
        ):
            found.append((previous, 0 if line[0] == "=" else 1))
        previous = i
    return found


def document_headings(
    text: str, lines: Sequence[str], errors: Sequence[int], signals: Callable[[str], int]
) -> list[tuple[int, int]] | None:
    """A document's headings, or None when the text is not a document: fewer than
    MIN_DEFINITIONS headings or more than MAX_DENSITY per line (a shell history of `# cmd`
    prompts), an error line (`errors`: the indices the caller's scoring calls errors) outside
    its fenced examples, or more than SIGNAL_SHARE of a sample of the lines outside them
    starting like a log's signals. A log with a few `# step` lines keeps every error it would
    keep."""
    if len(_HEADING_HINT.findall("\n" + text)) < MIN_DEFINITIONS:
        return None
    outside = _outside_fences(lines)
    if errors and set(errors).intersection(outside):
        return None
    found = headings(lines, outside)
    nonblank = sum(1 for line in lines if line.strip())
    if not MIN_DEFINITIONS <= len(found) <= MAX_DENSITY * nonblank:
        return None
    every = [lines[i] for i in outside[:: max(1, len(outside) // SAMPLE)]]
    sample = [line for line in every if line.strip()]
    return None if signals("\n".join(sample)) > SIGNAL_SHARE * len(sample) else found


def definitions(lines: Sequence[str]) -> list[tuple[int, int]]:
    """(index, rank) of each line that defines something, in order. The rank is the line's
    indentation, plus 2 for a module-level name: after the top-level functions, types and
    classes, before their methods."""
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
    found: list[tuple[int, int]] = []
    for m in _SCAN.finditer("\n" + "\n".join(lines)):
        i = bisect_right(starts, m.start()) - 1
        indent = m.group("indent")
        if indent is not None:
            found.append((i, len(indent.expandtabs(4))))
        else:
            named = m.group("top") is None and m.group("function") is None
            found.append((i, 2 if named else 0))
    return found


def choose(candidates: Sequence[tuple[int, int]], cost: Sequence[int], room: int) -> list[int]:
    """The lowest-ranked definitions first (then in order) while their lines fit in `room`."""
    chosen: list[int] = []
    spent = 0
    for i, _ in sorted(candidates, key=lambda c: (c[1], c[0])):
        if spent + cost[i] <= room:
            chosen.append(i)
            spent += cost[i]
    return sorted(chosen)


# The lines a unified diff is made of: context, additions, removals, and its headers.
_DIFF_LINE = re.compile(
    r"\n(?:[ +\-]|@@ |diff |index |new file mode|deleted file mode|old mode|new mode|similarity"
    r"|dissimilarity|rename |copy |Binary files |\\ No newline)"
)
DIFF_SHARE = 0.8  # of the non-blank lines, at least, for a text to be a diff


def is_diff(text: str, lines: Sequence[str]) -> bool:
    """A unified diff: file or hunk headers, and diff lines nearly everywhere else (a diff with
    a test run's output after it stays a log)."""
    headers = text.startswith("diff --git ") + text.count("\ndiff --git ")
    if not headers and text.count("\n@@ -") < 2:
        return False
    nonblank = sum(1 for line in lines if line.strip())
    return len(_DIFF_LINE.findall("\n" + text)) >= DIFF_SHARE * nonblank


def diff_map(lines: Sequence[str]) -> list[tuple[int, int]]:
    """(index, rank) of a diff's file headers (rank 0) and hunk headers (rank 4)."""
    return [
        (i, 0 if line.startswith("diff ") else 4)
        for i, line in enumerate(lines)
        if line.startswith(("diff ", "@@ "))
    ]


# `grep -n`/`grep -rn`/`rg -n` output: `path:line:` then the matched text (`path-line-` for the
# context lines of -A/-B/-C, `--` between groups).
# The path is one word with something besides digits and hyphens in it: a log's leading date
# (`2026-11-30 ...`) is no path.
_MATCH = re.compile(r"^(?=[^\s:]*[^\d\s:-])([^\s:]+?)[:-](\d+)[:-]")
MATCH_SHARE = 0.8  # of the non-blank lines, at least, for a text to be search results
# A compiler's or linter's diagnostic has the same `path:line:` start (gcc, mypy, flake8, ruff):
# a list of those is a log of errors, not search results.
_DIAGNOSTIC = re.compile(
    r"^[^\s:][^:\n]*?:\d+:(?:\d+:)? ?(?:fatal error|error|warning|note|[A-Z]{1,3}\d{2,4})\b"
)
DIAGNOSTIC_SHARE = 0.2
HIT_SHARE = 0.1  # of the matched lines, at least, matches rather than context (grep -C 4: 1/9)


def match_files(lines: Sequence[str]) -> list[str | None] | None:
    """Each line's file for `grep -n`-style search results (None for a `--` separator or a line
    that names none), or None when the text is not search results."""
    files: list[str | None] = []
    matched = nonblank = diagnostics = hits = 0
    for line in lines:
        if not line.strip():
            files.append(None)
            continue
        nonblank += 1
        m = _MATCH.match(line)
        files.append(m.group(1) if m else None)
        matched += m is not None or line == "--"
        hits += m is not None and m.group(0).endswith(":")
        diagnostics += m is not None and _DIAGNOSTIC.match(line) is not None
    # Context lines (`path-12-`) come around matches (`path:12:`): a table whose every row
    # starts `name-12345-...` (kubectl's pods) holds no match.
    if nonblank < MIN_DEFINITIONS or matched < MATCH_SHARE * nonblank or hits < HIT_SHARE * matched:
        return None
    return None if diagnostics > DIAGNOSTIC_SHARE * nonblank else files


def first_matches(files: Sequence[str | None]) -> list[tuple[int, int]]:
    """(index, rank 0) of the first line of each file's matches."""
    out: list[tuple[int, int]] = []
    previous = None
    for i, name in enumerate(files):
        if name is not None and name != previous:
            out.append((i, 0))
        if name is not None:
            previous = name
    return out


# `git log` in any format with headers (medium, full, fuller; with --stat, -p or --graph): a
# `commit <hash>` line, header lines (`Author:`, `Merge:`, `Date:`...) up to a blank line, then
# the message indented. Its `N files changed` lines are no verdicts and its messages' words
# ("fix the error in ...") no errors: it is read like a diff, with the commits as its map.
_COMMIT = re.compile(r"^[*|/\\ ]*commit [0-9a-f]{7,64}(?![\w-])")
_HEADERS = ("Author:", "Merge:")
_GRAPH = "*|/\\ _"  # what `--graph` draws before a line
_MESSAGE_SEARCH = 12  # lines after a commit line where its header and subject must be
# A commit log's subjects are most of what it says: they get more of the budget than a source
# file's definitions, which stand beside the code they name.
COMMIT_SHARE = 0.6


def is_commit_log(text: str) -> bool:
    """Whether `text` is `git log` output (see commit_map)."""
    return (
        text.count("commit ") >= MIN_DEFINITIONS and commit_map(text.split("\n"), text) is not None
    )


def commit_map(lines: Sequence[str], text: str) -> list[tuple[int, int]] | None:
    """(index, rank) of each commit's hash line and subject (rank 0: a subject says what the
    commit did, its hash how to `git show` it) in `git log` output, plus a diff's file (2) and
    hunk (4) headers; None when the text holds fewer than MIN_DEFINITIONS commits, each a
    `commit` line followed by an `Author:` or `Merge:` line."""
    if text.count("commit ") < MIN_DEFINITIONS:
        return None
    found: list[tuple[int, int]] = []
    commits = 0
    n = len(lines)
    for i, line in enumerate(lines):
        if line.startswith(("diff ", "@@ ")):
            found.append((i, 2 if line[0] == "d" else 4))
            continue
        if "commit " not in line or not _COMMIT.match(line) or i + 1 >= n:
            continue
        if not lines[i + 1].lstrip(_GRAPH).startswith(_HEADERS):
            continue
        commits += 1
        found.append((i, 0))
        j = i + 2
        end = min(n, i + _MESSAGE_SEARCH)
        while j < end and lines[j].strip(_GRAPH):  # the rest of the header
            j += 1
        while j < end and not lines[j].strip(_GRAPH):  # the blank line(s) after it
            j += 1
        if j < end and not _COMMIT.match(lines[j]):
            found.append((j, 0))
    return sorted(found) if commits >= MIN_DEFINITIONS else None
