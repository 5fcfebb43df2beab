"""Facts listed under the trim marker: how each command ended comes first."""

from __future__ import annotations

from proxy.pipeline.facts import extract_facts


def tool(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "c", "content": text}


def test_a_commands_last_status_line_is_a_fact():
    out = "Processing ./pkg\nSuccessfully installed pkg-1.0\n"
    out += "151 CA certificates loaded\n[exit code: 0]"
    facts = extract_facts([tool(out)])
    assert "151 CA certificates loaded" in facts
    assert "Successfully installed pkg-1.0" in facts


def test_test_summary_and_last_error_lead_the_list():
    run = (
        "collected 3 items\n"
        + "x = 1\n" * 50
        + "FAILED t.py::a - ValueError\n1 failed, 2 passed in 0.1s\n"
    )
    usage = "usage: tool [-h]\ntool: error: unrecognized arguments: --bad\n[exit code: 2]"
    facts = extract_facts([tool(run), tool(usage)])
    assert facts[:2] == ["1 failed, 2 passed in 0.1s", "tool: error: unrecognized arguments: --bad"]


def test_listings_footers_and_warning_filters_are_not_facts():
    listing = "    1\timport os\n    2\tprint(os.sep)\n[exit code: 0]"
    facts = extract_facts(
        [tool(listing), {"role": "user", "content": "run pytest -W error::Warning"}]
    )
    assert not any("import os" in f or "exit code" in f or "error::" in f for f in facts)
