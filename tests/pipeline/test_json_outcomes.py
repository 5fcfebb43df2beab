"""JSON outcomes: which objects of a JSON tool result report a failure, and the line each gives."""

from __future__ import annotations

import json

import pytest

from proxy.pipeline.facts import extract_facts
from proxy.pipeline.json_outcomes import failure_lines


def tool(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "c", "content": text}


def runs(failed_at: int | None, n: int = 60) -> list[dict]:
    out = [
        {"databaseId": 100 + i, "displayTitle": f"Update docs {i}", "conclusion": "success"}
        for i in range(n)
    ]
    if failed_at is not None:
        out[failed_at] = {
            "databaseId": 777,
            "displayTitle": "Fix rounding",
            "conclusion": "failure",
        }
    return out


def test_the_one_failed_item_of_a_listing_gives_its_line_with_its_ids() -> None:
    text = json.dumps(runs(37), indent=2) + "\n[exit code: 0]"
    assert failure_lines(text) == [
        '"conclusion": "failure", "databaseId": 777, "displayTitle": "Fix rounding"'
    ]


def test_a_deep_failure_is_named_by_the_record_around_it() -> None:
    """A pod's waiting reason sits six levels down; the line names the pod, not the container."""
    pod = {
        "metadata": {"name": "billing-api-7d9f8", "namespace": "shop"},
        "status": {
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": 14,
                    "state": {
                        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}
                    },
                }
            ]
        },
    }
    healthy = {"metadata": {"name": "web-1"}, "status": {"phase": "Running"}}
    text = json.dumps({"kind": "List", "items": [healthy, pod, healthy]}, indent=4)
    assert failure_lines(text) == [
        '"reason": "CrashLoopBackOff", "name": "billing-api-7d9f8", "message": "back-off 5m0s"'
    ]


@pytest.mark.parametrize(
    ("document", "line"),
    [
        (
            {"error": {"code": 404, "message": "Not Found"}},
            '"error": {"code": 404, "message": "Not Found"}',
        ),
        (
            [{"Name": "/web", "State": {"OOMKilled": True, "ExitCode": 137}}],
            '"OOMKilled": true, "Name": "/web", "ExitCode": 137',
        ),
        (
            {"suite": "unit", "failures": 3, "tests": 40},
            '"failures": 3, "suite": "unit", "tests": 40',
        ),
        (
            {"job": "lint", "stderr": "E501 line too long"},
            '"stderr": "E501 line too long", "job": "lint"',
        ),
        (
            [{"test": "adds", "status": "passed"}, {"test": "subtracts", "status": "FAILED"}],
            '"status": "FAILED", "test": "subtracts"',
        ),
    ],
)
def test_each_way_of_reporting_a_failure(document: object, line: str) -> None:
    assert failure_lines(json.dumps(document)) == [line]


@pytest.mark.parametrize(
    "document",
    [
        # Mentions are not reports: a dependency's name, a package summary, a status sentence.
        [{"name": "attrs", "requires": ["pytest-timeout; extra == 'test'"]}],
        [{"name": "tldextract", "summary": "Separates a URL's domain, using exceptions"}],
        {"result": "No errors found", "status": "ok"},
        {"log": "retrying after failure of the upstream (attempt 2 of 5)"},
        # Empty slots for a failure hold none.
        {"error": None, "errors": [], "failures": 0, "stderr": "", "exception": {}},
        {"failed": False, "timedOut": False},
        [1, 2, 3],
    ],
)
def test_what_does_not_report_a_failure(document: object) -> None:
    assert failure_lines(json.dumps(document)) == []


@pytest.mark.parametrize(
    "text",
    [
        "FAILED tests/test_a.py::test_b - AssertionError",  # a log: outcomes reads it
        '{"error": "x"',  # broken JSON
        '{"error": "x"}\n' + "trailing prose line\n" * 10,  # more than a short trailer
        "[" * 5000 + "]" * 5000,  # deeper than the decoder goes
        "",
    ],
)
def test_other_text_gives_nothing_and_never_raises(text: str) -> None:
    assert failure_lines(text) == []


def test_lines_are_bounded_in_number_and_length() -> None:
    items = [{"id": i, "status": "failed", "note": "x" * 150} for i in range(10)]
    lines = failure_lines(json.dumps(items), limit=4, max_chars=60)
    assert lines == [f'"status": "failed", "id": {i}' for i in range(4)]
    # The failing members themselves are never cut, however long: a fact is verbatim.
    long = {"error": "y" * 300}
    assert failure_lines(json.dumps(long), max_chars=60) == [f'"error": "{"y" * 300}"']


def test_a_dropped_json_result_gives_its_failure_as_the_verdict() -> None:
    """Under the trim marker the failed run leads the list, before names and versions."""
    call = {"id": "c", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    span = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        tool(json.dumps(runs(12), indent=2) + "\n[exit code: 0]"),
    ]
    facts = extract_facts(span)
    assert facts[0] == '"conclusion": "failure", "databaseId": 777, "displayTitle": "Fix rounding"'
    assert extract_facts([*span[:1], tool(json.dumps(runs(None), indent=2))]) == []
