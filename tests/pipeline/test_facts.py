"""Facts listed under the trim marker: how each command ended comes first."""

from __future__ import annotations

import os

from proxy.pipeline import Policy, compute_budget, shrink
from proxy.pipeline.facts import MAX_FACT_CHARS, extract_facts
from proxy.tokenizers import Tokenizers

COUNTER = Tokenizers(cache_dir=os.environ.get("TIKTOKEN_CACHE_DIR", "")).for_model("qwen")


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


# --- partial lines go after the whole lines of their kind --------------------------------------

LONG_INSTALL = "Successfully installed " + " ".join(f"package{i}-{i}.0.1" for i in range(40))
BUILT = "Successfully built demo-1.0-py3-none-any.whl"


def test_a_clipped_line_comes_after_the_whole_lines_and_before_the_names():
    span = [
        tool(f"Collecting package0\n{LONG_INSTALL}\n[exit code: 0]"),
        tool(f"running bdist_wheel\nwrote /src/demo/build.log\n{BUILT}\n[exit code: 0]"),
    ]
    facts = extract_facts(span)
    clipped = next(f for f in facts if f.startswith("Successfully installed package0-0.0.1"))
    assert len(clipped) <= MAX_FACT_CHARS < len(LONG_INSTALL)
    # First seen, but listed after the later whole line; still before every name (a path).
    assert facts.index(BUILT) < facts.index(clipped) < facts.index("/src/demo/build.log")


def test_a_line_cut_by_stage_one_comes_after_the_whole_lines():
    elided = "[... 420 chars (158 tokens) omitted by shrink-proxy ...]"
    cut = f"Successfully installed a-1 b-2 {elided} z-9"
    facts = extract_facts([tool(f"Collecting a\n{cut}\n"), tool(f"running build\n{BUILT}\n")])
    assert facts.index(BUILT) < facts.index(cut)


def test_whole_lines_keep_the_order_they_were_picked_in():
    span = [tool("Collecting a\nSuccessfully installed a-1\n"), tool(f"running build\n{BUILT}\n")]
    assert extract_facts(span)[:2] == ["Successfully installed a-1", BUILT]


def test_the_second_round_stays_after_the_first_when_a_line_is_partial():
    span = [
        tool(f"Collecting a\n{LONG_INSTALL} done\n"),
        tool(f"see /a/b.py\nrunning build\n{BUILT}\n"),
    ]
    facts = extract_facts(span, quotas={"statuses": (1, 1), "paths": (2, 2)})
    assert facts[1:] == ["/a/b.py", BUILT]  # BUILT came in the second round, past its quota
    assert facts[0].startswith("Successfully installed package0")


def test_the_trim_marker_spends_its_room_on_whole_lines_first():
    """End to end: a long clipped install line seen first no longer eats the facts' room."""
    msgs: list[dict] = [{"role": "system", "content": "sys"}]
    outputs = [
        f"Collecting x\n{LONG_INSTALL}\n[exit code: 0]",
        f"building\n{BUILT}\n[exit code: 0]",
    ]
    outputs += [f"step {t}\nstep {t} finished fine\n" for t in range(20)]
    for t, out in enumerate(outputs):
        msgs.append({"role": "user", "content": f"do step {t} " + "please " * 200})
        call = {"id": f"c{t}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": out})
    msgs.append({"role": "user", "content": "what was built?"})
    budget = compute_budget(4096, 512, default_reserve=256, floor=128, margin_share=0.02)
    plan = shrink(
        msgs, budget=budget, counter=COUNTER, policy=Policy(facts_tokens=110, facts_window_share=0)
    )
    marker = plan.messages[plan.marker_index]["content"]
    assert BUILT in marker
    assert plan.report.fits
