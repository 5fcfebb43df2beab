"""The fast fact extractor gives exactly what the frozen line-by-line one (facts_reference) gives.

Compared per message (`_candidates`, and the helpers it is made of) and per span (the facts
`extract_facts` picks, with the default and with other quotas), on every message of the dev
corpus, on a long session built from it, on the other toolchains' logs of ecosystems.py, and on
generated texts that mix the shapes the patterns look for with odd line breaks, odd whitespace and
random characters.

The reference lists the picked facts in the order it picked them; `extract_facts` since puts
partial lines after the whole ones of their kind (tests/pipeline/test_facts.py): so the pick
(`_select`) is compared in order, and `extract_facts` as the same facts in any order.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.pipeline import facts, outcomes, scan
from tests.pipeline import ecosystems
from tests.pipeline import facts_reference as reference
from tests.shared_dir import CORPUS

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="evaluation corpus not available")
QUOTAS = [
    None,
    {"paths": (3, 1), "errors": (2, 0), "numbers": (5, 5), "verdicts": (1, 1)},
    {c: (100, 100) for c in facts.CATEGORIES},
    {c: (1, -1) for c in reversed(facts.CATEGORIES)},
]


@cache
def conversations() -> tuple[list[Any], ...]:
    return tuple(json.loads(p.read_text())["messages"] for p in sorted(CORPUS.glob("*.json")))


def texts_of(message: Any) -> list[str]:
    texts = list(reference._texts(message))
    for args, raw in reference._calls(message):
        texts.extend(reference._strings(args) if isinstance(args, dict) else [raw])
    return texts


def assert_same_text(text: str) -> None:
    assert outcomes.error_lines(text) == list(reference._error_lines(text))
    assert outcomes.status_line(text) == reference._status_line(text)
    assert outcomes.verdict(text) == reference._verdict(text)
    assert list(facts._paths(text)) == list(reference._paths(text))


def assert_same_message(message: Any) -> None:
    assert facts._candidates(message) == reference._candidates(message)


def assert_same_span(
    span: list[Any], quotas_list: list[Any] = QUOTAS, limits: tuple[int, ...] = (facts.MAX_FACTS, 7)
) -> None:
    for quotas in quotas_list:
        for limit in limits:
            expected = reference.extract_facts(span, limit=limit, quotas=quotas)
            picked = facts._select(span, limit, facts.CATEGORIES if quotas is None else quotas)
            assert picked[0] == expected
            listed = facts.extract_facts(span, limit=limit, quotas=quotas)
            assert sorted(listed) == sorted(expected)


@needs_corpus
def test_every_corpus_message_gives_the_same_facts() -> None:
    for messages in conversations():
        for message in messages:
            assert_same_message(message)
            assert_same_span([message], QUOTAS[:2])
            for text in texts_of(message):
                assert_same_text(text)


@needs_corpus
def test_every_corpus_conversation_and_span_gives_the_same_facts() -> None:
    for messages in conversations():
        assert_same_span(messages)
        for start in range(0, len(messages), 3):
            assert_same_span(messages[start : start + 9], QUOTAS[:2], (facts.MAX_FACTS,))


@needs_corpus
def test_a_long_session_gives_the_same_facts() -> None:
    """As bench.pipeline_cost builds it: conversations appended until ~100k tokens."""
    session = [m for messages in conversations() for m in messages if m.get("role") != "system"]
    assert_same_span(session[:100], QUOTAS[:2])
    assert_same_span(session, QUOTAS[:1])


@needs_corpus
def test_texts_past_the_scan_window_give_the_same_facts() -> None:
    tool_texts = [
        m["content"]
        for messages in conversations()
        for m in messages
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]
    big = "\n".join(tool_texts)
    while len(big) < 2 * facts.MAX_SCAN_CHARS:
        big += "\n" + big
    for text in (big, big[: facts.MAX_SCAN_CHARS + 1], big[7 : facts.MAX_SCAN_CHARS + 50_000]):
        message = {"role": "tool", "tool_call_id": "c", "content": text}
        assert_same_message(message)
        assert_same_span([message])


def test_other_toolchains_logs_give_the_same_facts() -> None:
    for seed in range(3):
        logs = ecosystems.logs(seed)
        for log in logs:
            assert_same_text(log.text)
            assert_same_message({"role": "tool", "tool_call_id": "c", "content": log.text})
        assert_same_span([{"role": "tool", "tool_call_id": "c", "content": x.text} for x in logs])


FRAGMENTS = [
    "Traceback (most recent call last):",
    '  File "/app/src/main.py", line 12, in <module>',
    "    raise ValueError('bad')",
    "\tat com.example.Main(Main.java:3)",
    "ValueError: bad value",
    "requests.exceptions.InvalidSchema: No connection adapters",
    "KeyboardInterrupt",
    "[... 40 lines omitted by shrink-proxy ...]",
    "E   AssertionError: assert 1 == 2",
    "E       KeyError: 'x'",
    "FAILED tests/test_a.py::test_b - TypeError: nope [ 50%]",
    "===== 1 failed, 2 passed in 0.12s =====",
    "3 passed, 1 skipped in 1.50s",
    "2 errors in 3s",
    "1 deselected in 0.1s (0:00:01)",
    "Successfully installed requests-2.31.0 urllib3-2.0.4",
    "Successfully built x",
    "added 12 packages in 3s",
    "removed 1 package",
    "3 files changed, 10 insertions(+), 2 deletions(-)",
    "1 file changed",
    "npm ERR! code ERESOLVE",
    "npm error peer react@18",
    "make[2]: *** [Makefile:12: all] Error 1",
    "make: *** No rule",
    "src/ring.c:10:5: error: unknown type name 'size'",
    "ld: undefined reference to `ring_push'",
    "fatal: not a git repository",
    "E: Unable to locate package libfoo",
    "ERROR: Could not build wheels",
    "Error: Cannot find module 'x'",
    "error[E0425]: cannot find value",
    "pytest -W error::DeprecationWarning",
    "bash: foo: command not found",
    "ls: cannot access '/x': No such file or directory",
    "Permission denied (publickey)",
    "Segmentation fault (core dumped)",
    "listen tcp :8080: bind: address already in use",  # strerror's messages, in any case
    "open config.yaml: No Such File Or Directory",
    "İstanbul mirror: connection reset by peer",  # its lowercase is one character longer
    "2026-11-30 09:12:01,120 ERROR app.worker: lost the db",  # a log level of its own
    '{"level":"error","msg":"x"}',
    "LOG_LEVEL=ERROR",
    "web-1   0/1   CrashLoopBackOff   3   1m",  # status tables
    "app_1   Exited (137) 2 hours ago",
    "app_2   Exited (0) 2 hours ago",
    "src/a.py:1:8: F401 `os` imported but unused",  # a linter's rule code
    "09:12:33: A1234 boarded",
    "##[error]Process completed with exit code 1.",  # GitHub Actions
    "::error file=a.py,line=1::bad",
    "    1\timport os",
    "   12\traise KeyError",
    "@@ -1,3 +1,4 @@",
    "+    raise Exception('x')",
    "-from x import Error",
    "> assert x",
    "# error: not really",
    "// TODO error:",
    "def handler(request):",
    "class ParserError(Exception):",
    "fn main() {",
    "function go(a) {",
    "func Run()",
    "def\n\n  spaced_name",
    "$ pip install requests==2.31.0",
    "  $ ls -la /tmp",
    "$",
    "see https://example.com/a/b.py?x=1).",
    "http://localhost:8000/v1/chat",
    "https://github.com/psf/requests/issues/1",
    "/usr/lib/python3.11/site-packages/six.py",
    "./src/main.c",
    "~/proj/setup.cfg",
    "../a/b",
    "a/b/c",
    "x:/a/b",
    "12/34/2024",
    "64.9/64.9 MB",
    "requests==2.31.0",
    "numpy>=1.26.4",
    "pkg@1.0.0",
    "v1.2.3",
    "v2.0-beta",
    "1.2.3rc1",
    "3.11.7.",
    "Python 3.11",
    "`foo.bar()`",
    "`x`",
    "`None`",
    "took 12ms",
    "3.5 s",
    "100%",
    "5 tests",
    "42\nfiles",
    "7,5 MiB",
    "Makefile",
    "Dockerfile.dev",
    "setup.py",
    "archive.tar.gz",
    "README.md:",
    "151 CA certificates loaded",
    "No broken requirements found.",
    "[exit code: 1]",
    "Process exited with code 0",
    "[notice] A new release of pip is available",
    "drwxr-xr-x 2 root root 4096 .",
    "| a | b |",
    "SomeError",
    "foo.Error:",
    "RuntimeException",
    "ERROR",
    "errors",
    # Other toolchains' shapes (tests/pipeline/ecosystems.py has whole logs of them).
    "=== RUN   TestDecodeHeader",
    '    codec_test.go:118: DecodeHeader("v2") = 3, want 4',
    "--- FAIL: TestDecodeHeader (0.01s)",
    "    --- FAIL: TestX/sub (0.00s)",
    "--- PASS: TestOk (0.00s)",
    "FAIL",
    "FAIL\tgithub.com/acme/codec\t0.412s",
    "FAIL\tgithub.com/acme/x [build failed]",
    "ok  \tgithub.com/acme/codec/bits\t0.031s",
    "ok  \tgithub.com/acme/y\t(cached)",
    "./codec.go:12:5: undefined: frob",
    "panic: runtime error: index out of range [3] with length 3",
    "thread 'main' panicked at src/main.rs:4:5:",
    " FAIL  src/cart/discount.test.ts",
    "  ● Cart › applies the member discount",
    "  ● Console",
    "    Expected: 90",
    "    Received: 100",
    "Tests:       1 failed, 391 passed, 392 total",
    "Test Suites: 1 failed, 97 passed, 98 total",
    "  318 passing (4s)",
    "  1 failing",
    "test result: FAILED. 3 passed; 1 failed; 0 ignored",
    "Failed!  - Failed:     1, Passed:   391, Skipped:     0, Total:   392",
    "[INFO] BUILD FAILURE",
    "BUILD SUCCESSFUL in 5s",
    "Build FAILED.",
    "Build succeeded with 1 warning(s) in 2.5s",
    "    1 Error(s)",
    "[ERROR] /home/Ledger.java:[88,24] cannot find symbol",
    "[ERROR] ",
    "[FATAL] Non-resolvable parent POM",
    "2024-01-01 12:00:00 [CRITICAL] disk full",
    "src/billing/invoice.ts(112,7): error TS2322: Type 'string'",
    "/home/src/Api/Program.cs(31,17): error CS0103: The name 'cfg'",
    "  77:9  error  'total' is assigned a value but never used  no-unused-vars",
    "✖ 312 problems (1 error, 311 warnings)",
    "✖ 3 problems",
    "Found 1 error in src/billing/invoice.ts:112",
    "[12:00:01 PM] Found 0 errors. Watching for file changes.",
    "e: file:///home/app/src/main/kotlin/Report.kt:57:13 Unresolved reference: totalOf",
    "Execution failed for task ':app:compileKotlin'.",
    "CONFLICT (content): Merge conflict in src/billing/ledger.py",
    "Automatic merge failed; fix conflicts and then commit the result.",
    "#12 4.211 src/main.ts:9:1 - error: Cannot find module './routes'",
    "#12 ERROR: process did not complete successfully: exit code: 2",
    "  --> src/ledger.rs:214:27",
    "      at Context.<anonymous> (test/ledger.spec.js:64:28)",
    "   at Api.Program.Main() in /src/Program.cs:line 31",
    '  on main.tf line 48, in resource "aws_lambda_function" "api":',
    "│ Error: Unsupported attribute",
    "│ ",
    "│   on main.tf line 48, in resource:",
    "x",
    "",
    "   ",
]
BREAKS = ["\n"] * 8 + ["\r\n", "\r", "\n\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\n\r"]
INDENTS = ["", "", "", "  ", "    ", "\t", "\xa0", "\u3000 ", "\x1f"]
ODD = "aZ09 _-./:=@~`$[]()!<>%,+'\"\n\r\t\x0b\x0c\x1c\x85\xa0\u2028\u3000éΩ"

# A traceback: its header, indented frames, omission markers and blank lines, then the exception.
traceback = st.tuples(
    st.sampled_from(INDENTS),
    st.lists(
        st.sampled_from(
            [
                '  File "/a/b.py", line 3, in f',
                "    x = 1",
                "\tcontinued",
                "[... 3 lines omitted by shrink-proxy ...]",
                "[...]",
                "",
                "   ",
                "\xa0indented",
            ]
        ),
        max_size=5,
    ),
    st.sampled_from(FRAGMENTS),
    st.sampled_from(BREAKS),
).map(lambda t: t[3].join([t[0] + FRAGMENTS[0], *t[1], t[2]]))

# An error line, then blank lines or Terraform's box edge, then maybe where it happened; a go test's
# `--- FAIL:` line between its neighbours.
LOCATIONS = [f for f in FRAGMENTS if f.lstrip(" │").startswith(("-->", "at ", "on "))]
diagnostic = st.tuples(
    st.sampled_from(FRAGMENTS),
    st.lists(st.sampled_from(["", "   ", "│", "│ ", "\t│"]), max_size=3),
    st.sampled_from(LOCATIONS + FRAGMENTS),
    st.sampled_from(BREAKS),
).map(lambda t: t[3].join([t[0], *t[1], t[2]]))
go_failure = st.tuples(
    st.sampled_from(FRAGMENTS),
    st.sampled_from(["--- FAIL: TestA (0.00s)", "    --- FAIL: TestA/b (0.00s)", "--- FAIL:"]),
    st.sampled_from(FRAGMENTS),
    st.sampled_from(BREAKS),
).map(lambda t: t[3].join(t[:3]))

line = st.one_of(
    traceback,
    diagnostic,
    go_failure,
    st.tuples(
        st.sampled_from(INDENTS),
        st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=3),
        st.sampled_from([" ", "", ": ", "\t", "/"]),
    ).map(lambda t: t[0] + t[2].join(t[1])),
    st.text(alphabet=ODD, max_size=40),
)


@st.composite
def texts(draw: Any) -> str:
    lines = draw(st.lists(line, max_size=30))
    out = ""
    for part in lines:
        out += part + draw(st.sampled_from(BREAKS))
    return out if draw(st.booleans()) else out.rstrip()


@st.composite
def messages(draw: Any) -> dict[str, Any]:
    role = draw(st.sampled_from(["tool", "tool", "user", "assistant", "function"]))
    message: dict[str, Any] = {"role": role}
    shape = draw(st.sampled_from(["str", "parts", "none"]))
    if shape == "str":
        message["content"] = draw(texts())
    elif shape == "parts":
        parts: list[Any] = [
            {"type": "text", "text": t} for t in draw(st.lists(texts(), max_size=3))
        ]
        if draw(st.booleans()):
            parts.insert(0, {"type": "image_url", "image_url": {"url": "x"}})
        message["content"] = parts
    if role == "assistant" and draw(st.booleans()):
        calls = []
        for text in draw(st.lists(texts(), min_size=1, max_size=3)):
            args = {"command": text, "path": draw(st.sampled_from(FRAGMENTS)), "more": [text]}
            raw = orjson.dumps(args).decode() if draw(st.booleans()) else text
            calls.append({"id": "c", "type": "function", "function": {"arguments": raw}})
        message["tool_calls"] = calls
    return message


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts())
def test_generated_texts_give_the_same_facts(text: str) -> None:
    message = {"role": "tool", "tool_call_id": "c", "content": text}
    assert_same_text(text)
    assert_same_message(message)
    # Short texts are scanned whole: scan these by runs of lines too, joined and apart.
    for gap in (0, 10**9):
        with mock.patch.multiple(scan, SHORT=0, GAP=gap):
            assert_same_text(text)
            assert_same_message(message)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=6))
def test_generated_spans_give_the_same_facts(span: list[dict[str, Any]]) -> None:
    for message in span:
        assert_same_message(message)
    assert_same_span(span)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_the_same_facts(text: str) -> None:
    assert_same_text(text)
    assert_same_message({"role": "tool", "tool_call_id": "c", "content": text})
