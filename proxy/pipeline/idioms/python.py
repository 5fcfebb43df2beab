"""Python: pytest, unittest, pip, tracebacks and the exception names they end with."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, MINOR, SECTION, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "python.pytest.summary",
        # The rule's ends possessive, the words looked for ahead, the end found lazily: one pass
        # over the line (`=+ [^\n]*\b(words)\b[^\n]* =+$` retried every word against every end).
        r"=++ (?=[^\n]*?\b(?:passed|failed|errors?|no tests ran)\b)[^\n]*? =++$",
        SUMMARY,
        examples=("========= 3 failed, 120 passed, 2 skipped in 4.21s =========",),
        counter=("========= FAILURES =========",),
        why="pytest's terminal summary line (its `summary_stats`)",
    ),
    Idiom(
        "python.pytest.summary.fact",
        r"=* ?(?P<fact>\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.*"
        r" in [\d.]+s\b.*?)(?: =+)?$",
        fact="outcomes",
        examples=("===== 3 failed, 120 passed in 4.21s =====",),
        why="the counts without pytest's `=` rule around them",
    ),
    Idiom(
        "python.pytest.counts",
        # The first count, found once (atomic), then the time after it: a later count could only
        # be followed by less of the line (searched from every count, the line is read again
        # for each).
        r"^(?>.*?\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b)"
        r".*\bin \d+(?:\.\d+)?s\b",
        SUMMARY,
        at="anywhere",
        triggers=(
            " passed",
            " failed",
            " error",
            " skipped",
            " xfailed",
            " xpassed",
            " deselected",
            " warning",
        ),
        # every PASSED line of a verbose run holds " passed"; few hold "in "
        requires=("in ",),
        examples=("1 failed, 3 passed in 0.42s",),
        why="pytest -q prints its counts without the rule",
    ),
    Idiom(
        "python.unittest.ran",
        r"Ran \d+ tests? in\b",
        SUMMARY,
        examples=("Ran 12 tests in 0.004s",),
        why="unittest's closing count",
    ),
    Idiom(
        "python.unittest.ran.fact",
        r"Ran \d+ tests? in [\d.]+s$",
        fact="outcomes",
        examples=("Ran 12 tests in 0.004s",),
    ),
    Idiom(
        "python.unittest.verdict",
        r"(?:OK|FAILED)(?: \([^\n]*\))?[ \t]*$",
        SUMMARY,
        examples=("FAILED (failures=1, errors=1)", "OK"),
        why="unittest's last line",
    ),
    Idiom(
        "python.unittest.verdict.fact",
        r"(?:FAILED|OK) \((?:failures|errors|skipped)=\d+",
        fact="outcomes",
        examples=("FAILED (failures=1, errors=1)",),
    ),
    Idiom(
        "python.unittest.fail",
        r"FAIL: \S",
        fact="errors",
        examples=("FAIL: test_add (tests.test_calc.CalcTests.test_add)",),
        why="unittest's and Django's header of a failed test",
    ),
    Idiom(
        "python.pip.successfully",
        r"Successfully (?:installed|built|uninstalled|tagged|created|registered)\b",
        SUMMARY,
        examples=("Successfully installed requests-2.32.3 urllib3-2.2.2",),
        why="pip's and docker's closing line",
    ),
    Idiom(
        "python.pip.successfully.fact",
        r"Successfully \w+ \S",
        fact="successes",
        examples=("Successfully installed requests-2.32.3",),
    ),
    Idiom(
        "python.exception",
        # A dotted name ending in Error/Exception/...: the whole name, then a look back at its end
        # (a backtracking `[\w.]*` would retry six suffixes at every character of every first word).
        r"[\w.]*+(?:(?<=Error)|(?<=Exception)|(?<=Exit)|(?<=Interrupt)|(?<=Failure)|(?<=Fault))"
        r"(?::|$)",
        STRONG,
        examples=("ValueError: invalid literal for int()", "requests.exceptions.InvalidSchema:"),
        why="the exception line closing a traceback (Python, Java, JS)",
    ),
    Idiom(
        "python.exception.fact",
        # From the start of a dotted name only, committed to its first word (a later one could only
        # be shorter), then the suffix ending it: tried at every dot, `\b[A-Za-z_][\w.]*Error`
        # reads the rest of the name again from each.
        r"(?<![\w.])(?>[\w.]*?(?<!\w)(?=[A-Za-z_]))[A-Za-z_][\w.]*?(?:Error|Exception)(?![\w.])"
        r"(?::(?!:)|$)",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("ValueError: invalid literal for int()",),
    ),
    Idiom(
        "python.pytest.detail",
        r"[E>][ \t]+\S",
        MEDIUM,
        examples=("E       AssertionError: assert 3 == 4", ">       assert add(1, 2) == 4"),
        why="pytest's assertion detail and the failing source line",
    ),
    Idiom(
        "python.traceback.frame",
        r"File \"[^\"\n]+\", line \d+",
        MEDIUM,
        examples=('  File "/app/main.py", line 12, in <module>',),
    ),
    Idiom(
        "python.location",
        # After `path:line:`, pytest's line closing each failure (where it was raised, and what),
        # or a linter's diagnostic behind `path:line:col:` (flake8, pylint, ruff --output-format
        # concise); one scan of the path for both, which nothing else may hold (possessive).
        r"[^\s:]++:\d+:(?: [\w.]*(?:Error|Exception|Failure|Exit|Interrupt)$"
        r"|\d+:[ \t]+[A-Z]{1,4}\d{3,4}\b"
        # g++'s template backtrace ends at the user's own line that set it off.
        r"|\d+:[ \t]+required from here$)",
        MEDIUM,
        examples=("tests/test_calc.py:12: AssertionError", "src/app.py:3:1: F401 unused"),
    ),
    Idiom(
        "python.pytest.section",
        r"={3,} [^\n]* ={3,}$",
        SECTION,
        examples=("=================== FAILURES ===================",),
    ),
    Idiom(
        "python.pytest.test_header",
        r"_{3,} [^\n]* _{3,}$",
        MINOR,
        examples=("______________ test_add ______________",),
    ),
)
