"""Python: pytest, unittest, pip, tracebacks and the exception names they end with."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, MINOR, SECTION, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "python.pytest.summary",
        r"=* ?(?P<fact>(?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b|"
        r"no tests ran\b).* in [\d.]+s\b.*?)(?: =+)?$",
        SUMMARY,
        "outcomes",
        examples=(
            "===== 3 failed, 120 passed, 2 skipped in 4.21s =====",
            "1 failed, 3 passed in 0.42s",
            "============ no tests ran in 0.01s ============",
        ),
        counter=("=== 3 failed ===", "collected 120 items"),
        why="pytest's terminal summary (`summary_stats`); the fact is its counts, without the rule",
    ),
    Idiom(
        "python.pytest.rule_summary",
        # The rule's ends possessive, the words looked for ahead, the end found lazily: one pass
        # over the line (`=+ [^\n]*\b(words)\b[^\n]* =+$` retried every word against every end).
        r"=++ (?=[^\n]*?\b(?:passed|failed|errors?|no tests ran)\b)[^\n]*? =++$",
        SUMMARY,
        examples=("============ 2 errors ============",),
        counter=("=================== FAILURES ===================",),
        why="a summary rule without the run's time (interrupted runs) still ranks; the facts "
        "list the counts with their time (python.pytest.summary)",
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
        examples=("py311: 1 failed, 3 passed in 0.42s",),
        counter=("tests/test_a.py::test_b PASSED",),
        why="tox and other wrappers print pytest's counts behind a prefix: they rank; the facts "
        "take the counts that start a line (python.pytest.summary)",
    ),
    Idiom(
        "python.pytest.collected",
        r"\bcollected \d+ items?\b",
        SUMMARY,
        at="anywhere",
        examples=("collected 120 items / 2 deselected / 118 selected",),
        why="how many tests ran; no verdict, so no fact",
    ),
    Idiom(
        "python.unittest.ran",
        r"Ran \d+ tests? in [\d.]+s$",
        SUMMARY,
        "outcomes",
        examples=("Ran 12 tests in 0.004s",),
        counter=("Ran the migrations in order",),
        why="unittest's closing count",
    ),
    Idiom(
        "python.unittest.verdict",
        r"(?:OK|FAILED)(?: \([^\n]*\))?$",
        SUMMARY,
        examples=("OK", "OK (skipped=2)"),
        counter=("OK, moving on",),
        why="unittest's last line; a bare OK says less than the count above it, which the facts "
        "keep as the verdict (python.unittest.ran)",
    ),
    Idiom(
        "python.unittest.failures",
        r"(?:FAILED|OK) \((?:failures|errors|skipped)=\d+",
        SUMMARY,
        "outcomes",
        examples=("FAILED (failures=1, errors=1)",),
        counter=("FAILED",),
    ),
    Idiom(
        "python.unittest.fail",
        r"FAIL: \S",
        STRONG,
        "errors",
        examples=("FAIL: test_add (tests.test_calc.CalcTests.test_add)",),
        why="unittest's and Django's header of a failed test",
    ),
    Idiom(
        "python.pip.successfully",
        r"Successfully \w+ \S",
        SUMMARY,
        "successes",
        examples=(
            "Successfully installed requests-2.32.3 urllib3-2.2.2",
            "Successfully built python-ldap",
            "Successfully tagged app:latest",
        ),
        counter=("Successfully",),
        why="pip's, setuptools' and docker's closing line",
    ),
    Idiom(
        "python.exception",
        # A dotted name ending in Error/Exception/...: the whole name, then a look back at its end
        # (a backtracking `[\w.]*` would retry six suffixes at every character of every first word).
        r"[\w.]*+(?:(?<=Error)|(?<=Exception)|(?<=Exit)|(?<=Interrupt)|(?<=Failure)|(?<=Fault))"
        r"(?::|$)",
        STRONG,
        examples=("KeyboardInterrupt", "requests.exceptions.ConnectionError: HTTPSConnectionPool"),
        counter=("errors.py",),
        why="the exception line closing a traceback (Python, Java, JS); the facts find exception "
        "names anywhere in a line (python.exception.named)",
    ),
    Idiom(
        "python.exception.named",
        # From the start of a dotted name only, committed to its first word (a later one could only
        # be shorter), then the suffix ending it: tried at every dot, `\b[A-Za-z_][\w.]*Error`
        # reads the rest of the name again from each.
        r"(?<![\w.])(?>[\w.]*?(?<!\w)(?=[A-Za-z_]))[A-Za-z_][\w.]*?(?:Error|Exception)(?![\w.])"
        r"(?::(?!:)|$)",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("E       ValueError: invalid literal for int() with base 10: 'x'",),
        counter=("ValueErrors happen", "see HeaderParseError.defects"),
        why="stage 1 ranks the name at a line's start (python.exception), where a traceback ends "
        "it; anywhere, every log line quoting an exception would rank with the real ones",
    ),
    Idiom(
        "python.pytest.detail",
        r"[E>][ \t]+\S",
        MEDIUM,
        examples=("E       assert 3 == 4", ">       assert add(1, 2) == 4"),
        counter=("Ensure the cache is warm",),
        why="pytest's assertion detail and the failing source line: facts only where they name "
        "an error (python.exception.named)",
    ),
    Idiom(
        "python.traceback.frame",
        r"File \"[^\"\n]+\", line \d+",
        MEDIUM,
        examples=('  File "/app/main.py", line 12, in <module>',),
        why="where a traceback went; the facts keep the exception that closes it",
    ),
    Idiom(
        "python.pytest.location",
        # pytest's line closing each failure: where it was raised, and what.
        r"[^\s:]++:\d+: [\w.]*(?:Error|Exception|Failure|Exit|Interrupt)$",
        MEDIUM,
        examples=("tests/test_calc.py:12: AssertionError",),
        why="its exception name makes it an error fact (python.exception.named)",
    ),
    Idiom(
        "python.pytest.section",
        r"={3,}+ [^\n]* ={3,}+$",
        SECTION,
        examples=("=================== FAILURES ===================",),
        why="where the lines below come from; no fact",
    ),
    Idiom(
        "python.pytest.test_header",
        r"_{3,}+ [^\n]* _{3,}+$",
        MINOR,
        examples=("______________ test_add ______________",),
        why="a failed test's report header; its errors are the facts",
    ),
)
