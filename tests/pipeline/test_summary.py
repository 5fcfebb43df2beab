"""Compaction by summary, the pure half: facts, the summarizer request, its answer, the apply."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import orjson
import pytest

from proxy.pipeline.facts import MAX_FACT_CHARS, MAX_FACTS, extract_facts, missing_facts, normalise
from proxy.pipeline.summary import (
    CHARS_PER_TOKEN,
    FACTS_TITLE,
    apply_summary,
    marker_position,
    read_answer,
    render_transcript,
    span_key,
    summary_body,
    summary_message,
    summary_request,
    summary_room,
)
from proxy.pipeline.trim import omitted_marker_text, trim_history
from proxy.pipeline.types import Policy
from tests.shared_dir import CORPUS


def call(name: str, args: Any, id_: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": id_,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        ],
    }


def tool(content: str, id_: str = "c1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": id_, "content": content}


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def covered(fact: str, facts: list[str]) -> bool:
    """Kept as such, or inside a longer kept fact (the shorter one is then redundant)."""
    return any(normalise(fact) in f for f in facts)


# --- extract_facts ------------------------------------------------------------------------------

FACT_CASES: list[tuple[str, list[dict[str, Any]], list[str], list[str]]] = [
    (
        "commands from tool-call arguments and $ lines",
        [
            call("run_command", {"command": "pytest -q  tests/"}),
            call("shell", {"cmd": ["ls", "-la", "/srv"]}),
            user("I ran this:\n$ make   test\nand it hung"),
        ],
        ["pytest -q tests/", "ls -la /srv", "make test"],
        [],
    ),
    (
        "error lines of several tools",
        [
            tool("Collecting x\nValueError: bad thing\n[exit code: 1]"),
            tool("npm ERR! code E404\nnpm error peer react@16 from x"),
            tool("main.c:3:1: error: expected ';' before '}' token"),
            tool("FAILED tests/test_a.py::test_x - AssertionError: assert 1 == 2"),
            tool("fatal: not a git repository (or any of the parent directories): .git"),
            tool("==== 3 failed, 1327 passed, 4 skipped in 60.75s (0:01:00) ===="),
        ],
        [
            "ValueError: bad thing",
            "npm ERR! code E404",
            "npm error peer react@16 from x",
            "main.c:3:1: error: expected ';' before '}' token",
            "FAILED tests/test_a.py::test_x - AssertionError: assert 1 == 2",
            "fatal: not a git repository (or any of the parent directories): .git",
            "3 failed, 1327 passed, 4 skipped in 60.75s (0:01:00)",
        ],
        [],
    ),
    (
        "last line of a traceback, whatever the exception name",
        [
            tool(
                "Traceback (most recent call last):\n"
                '  File "/app/x.py", line 3, in <module>\n'
                "    main()\n"
                "requests.exceptions.InvalidSchema: No connection adapters were found\n"
            )
        ],
        ["requests.exceptions.InvalidSchema: No connection adapters were found", "/app/x.py"],
        [],
    ),
    (
        "code listings and passing test ids are not errors",
        [
            tool("    12\t    except ValueError:\n    13\t        raise KeyError(k)\n"),
            tool("tests/test_cmp.py::TestOrderingException::test_eq PASSED  [  8%]"),
            tool("@@ -1,3 +1,4 @@ except ImportError:\n+except ImportError:"),
        ],
        [],
        ["except ValueError:", "tests/test_cmp.py::TestOrderingException::test_eq PASSED"],
    ),
    (
        "versions, URLs, identifiers, numbers",
        [
            user("Pin requests==2.32.3, we are on v1.4.0 and Python 3.11.4 at 127.0.0.1"),
            user("See https://github.com/psf/requests/issues/1084. The fix is in `make_class`."),
            tool("def check_health(url):\n    pass\nclass Runner:\n    pass\n`None` `x`"),
            tool("Downloaded 120.1 MB in 201.31s"),
        ],
        [
            "requests==2.32.3",
            "v1.4.0",
            "3.11.4",
            "https://github.com/psf/requests/issues/1084",
            "make_class",
            "check_health",
            "Runner",
            "120.1 MB",
        ],
        ["127.0.0.1", "None", "x", "https://github.com/psf/requests/issues/1084."],
    ),
    (
        "paths: absolute, home, relative with extension, tool-call path arguments",
        [
            call("read_file", {"path": "/home/user/app/main.py"}),
            call("run_command", {"command": "ls", "cwd": "/srv/www"}),
            tool("~/proj/www and src/attr/validators.py:509: ValueError and Makefile"),
        ],
        ["/home/user/app/main.py", "/srv/www", "~/proj/www", "src/attr/validators.py", "Makefile"],
        [],
    ),
    (
        "not paths: progress counters, dates, prose, URL paths",
        [tool("64.9/64.9 kB and 2024/01/02, and/or yes; https://example.com/a/b/c.json")],
        [],
        ["64.9/64.9", "2024/01/02", "and/or", "/a/b/c.json", "example.com/a/b/c.json"],
    ),
]


@pytest.mark.parametrize(
    ("span", "present", "absent"),
    [c[1:] for c in FACT_CASES],
    ids=[c[0] for c in FACT_CASES],
)
def test_extract_facts(span: list[dict[str, Any]], present: list[str], absent: list[str]) -> None:
    facts = extract_facts(span)
    for fact in present:
        assert covered(fact, facts), (fact, facts)
    for fact in absent:
        assert fact not in facts, (fact, facts)


def test_facts_deduplicated_in_priority_then_first_seen_order() -> None:
    span = [
        call("run_command", {"command": "cat /a/b.py"}),
        tool("KeyError: 'x'\nKeyError: 'x'"),
        call("run_command", {"command": "cat /a/b.py"}, "c2"),
        tool("TypeError: y", "c2"),
    ]
    facts = extract_facts(span)
    # The path is inside the command: one slot, not two.
    assert facts == ["KeyError: 'x'", "TypeError: y", "cat /a/b.py"]


def test_facts_are_bounded_in_number_and_length() -> None:
    long_command = "python -c '" + "x = 1; " * 100 + "'"
    span = [call("run_command", {"command": long_command})]
    span += [tool(f"E{i}Error: failure number {i}") for i in range(100)]
    span += [user(f"see /srv/data/file{i}.csv") for i in range(100)]
    facts = extract_facts(span)
    assert len(facts) == MAX_FACTS
    assert all(len(f) <= MAX_FACT_CHARS for f in facts)
    clipped = [f for f in facts if f.startswith("python -c")]
    assert clipped and normalise(long_command).startswith(clipped[0])
    assert "E0Error: failure number 0" in facts and "/srv/data/file0.csv" in facts


def test_one_noisy_message_does_not_take_every_error_slot() -> None:
    noisy = tool("\n".join(f"tests/t.py::test_{i} FAILED" for i in range(60)))
    span = [noisy, tool("OSError: disk full", "c2")]
    assert "OSError: disk full" in extract_facts(span)


@pytest.mark.parametrize(
    "junk",
    [
        None,
        5,
        {"role": 1, "content": 7},
        {"tool_calls": "x"},
        {"tool_calls": [None, {"function": None}, {"function": {"arguments": "not json"}}]},
        {"role": "user", "content": [{"type": "image_url"}, "x", {"text": 3}]},
    ],
)
def test_junk_never_raises(junk: Any) -> None:
    extract_facts([junk, user("ok /a/b.py")])
    render_transcript([junk], 1000)


# --- missing_facts, summary_message, summary_body -----------------------------------------------


@pytest.mark.parametrize(
    ("summary", "facts", "lost"),
    [
        ("ran pytest -q and got ValueError: x", ["pytest -q", "ValueError: x"], []),
        ("ran pytest   -q\n", ["pytest -q"], []),  # whitespace is normalised on both sides
        ("ran pytest -q", ["pytest  -q\n"], []),
        ("ran PYTEST -Q", ["pytest -q"], ["pytest -q"]),  # case-sensitive
        ("nothing", ["/a/b.py", "v1.2.3"], ["/a/b.py", "v1.2.3"]),
        ("", [], []),
    ],
)
def test_missing_facts(summary: str, facts: list[str], lost: list[str]) -> None:
    assert missing_facts(summary, facts) == lost


def test_summary_message_layout() -> None:
    m = summary_message("Task: fix it.", ["/a/b.py", "pytest -q"], role="system", dropped=14)
    assert m == {
        "role": "system",
        "content": "[shrink-proxy: summary of 14 earlier messages]\nTask: fix it.\n\n"
        f"{FACTS_TITLE}\n- /a/b.py\n- pytest -q",
    }
    bare = summary_message("  Note.\n", [], role="user", dropped=1)
    assert bare == {
        "role": "user",
        "content": "[shrink-proxy: summary of 1 earlier message]\nNote.",
    }
    assert summary_body(m["content"]) == m["content"].split("\n", 1)[1]
    assert summary_body("no header") == "no header"


def test_summary_message_bounds_the_facts_list() -> None:
    lost = [f"/srv/{i:03d}/" + "x" * 90 for i in range(100)]
    m = summary_message("s", lost, role="system", dropped=3, max_facts_chars=1000)
    bullets = [line for line in m["content"].splitlines() if line.startswith("- ")]
    assert 0 < len(bullets) < 100
    assert sum(len(b) + 1 for b in bullets) <= 1000
    assert bullets[0] == f"- {lost[0]}"  # priority order is kept


# --- summary_request ----------------------------------------------------------------------------


def test_summary_request_shape_and_transcript() -> None:
    span = [
        user("Fix the install."),
        {**call("run_command", {"command": "npm install"}), "content": "Reproducing:"},
        tool("npm error code ERESOLVE\n[exit code: 1]"),
    ]
    body = summary_request(span, model="m1", previous=None, max_tokens=500)
    assert body["model"] == "m1" and body["max_tokens"] == 500 and body["stream"] is False
    assert [m["role"] for m in body["messages"]] == ["user"]
    prompt = body["messages"][0]["content"]
    assert "user: Fix the install.\nassistant: Reproducing:\n" in prompt
    assert '-> run_command({"command":"npm install"})\n' in prompt
    assert "<- npm error code ERESOLVE\n[exit code: 1]" in prompt
    for heading in ("Task:", "Decisions:", "Files and code:", "Commands:", "Errors:", "Pending:"):
        assert heading in prompt
    assert "previous_note" not in prompt
    orjson.dumps(body)  # serialisable as is


def test_summary_request_is_bounded_and_cuts_head_and_tail() -> None:
    big = "HEAD-LINE\n" + "".join(f"line {i} of noise\n" for i in range(20_000)) + "TAIL-LINE"
    span = [user("go"), call("run", {"c": 1}), tool(big)] * 5
    body = summary_request(span, model="m", previous=None, max_tokens=600, max_input_tokens=4000)
    prompt = body["messages"][0]["content"]
    assert len(prompt) <= 4000 * CHARS_PER_TOKEN + 200
    assert prompt.count("HEAD-LINE") == 5 and prompt.count("TAIL-LINE") == 5
    assert "chars cut ..." in prompt


def test_summary_request_with_thousands_of_messages_stays_bounded() -> None:
    span = [user(f"message {i} " + "x" * 300) for i in range(3000)]
    body = summary_request(span, model="m", previous=None, max_tokens=600, max_input_tokens=2000)
    prompt = body["messages"][0]["content"]
    assert len(prompt) <= 2000 * CHARS_PER_TOKEN + 200
    assert "user: message 0 " in prompt and "user: message 2999 " in prompt
    assert "transcript entries cut ..." in prompt


def test_incremental_request_carries_the_previous_note() -> None:
    new = [user("now also bump the version")]
    body = summary_request(new, model="m", previous="Task: fix install.", max_tokens=600)
    prompt = body["messages"][0]["content"]
    assert "<previous_note>\nTask: fix install.\n</previous_note>" in prompt
    assert "Update it" in prompt
    assert "user: now also bump the version" in prompt


# --- read_answer --------------------------------------------------------------------------------


def answer(content: Any) -> bytes:
    return orjson.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (answer("  Task: x  "), "Task: x"),
        (answer("<think>hmm\nlong</think>\nTask: x"), "Task: x"),
        (answer("reasoning here</think>Task: x"), "Task: x"),
        (answer("<think>never closed because max_tokens ran out"), ""),
        (answer(""), ""),
        (answer(None), ""),
    ],
)
def test_read_answer(payload: bytes, text: str) -> None:
    assert read_answer(payload) == text


@pytest.mark.parametrize(
    "payload",
    [b"<html>oops</html>", b"{}", b'{"choices": []}', b'{"choices": [{}]}', answer(["a", "b"])],
)
def test_read_answer_refuses_garbage(payload: bytes) -> None:
    with pytest.raises(ValueError):
        read_answer(payload)


# --- span_key -----------------------------------------------------------------------------------


def test_span_key_is_stable_and_discriminating() -> None:
    span = [{"role": "user", "content": "a", "name": "n"}]
    key = span_key(span, model="m", settings_fingerprint="f")
    reordered = [{"name": "n", "content": "a", "role": "user"}]
    assert span_key(reordered, model="m", settings_fingerprint="f") == key
    assert span_key(span, model="m2", settings_fingerprint="f") != key
    assert span_key(span, model="m", settings_fingerprint="g") != key
    assert span_key([{**span[0], "content": "b"}], model="m", settings_fingerprint="f") != key
    assert span_key(span + span, model="m", settings_fingerprint="f") != key


# --- apply --------------------------------------------------------------------------------------


def test_apply_summary_replaces_the_trim_marker() -> None:
    messages = [{"role": "system", "content": "s"}] + [
        user(f"turn {i} " + "x" * 400) for i in range(20)
    ]
    result = trim_history(messages, 600, lambda m: 4 + len(str(m.get("content"))) // 4, Policy())
    assert result is not None and result.dropped_messages
    at = marker_position(result.messages)
    assert at == 1
    assert result.messages[at]["content"] == omitted_marker_text(
        result.dropped_messages, result.dropped_tokens
    )
    out = apply_summary(result.messages, at, "[shrink-proxy: summary ...]", "user")
    assert out[at] == {"role": "user", "content": "[shrink-proxy: summary ...]"}
    assert all(a is b for i, (a, b) in enumerate(zip(out, result.messages, strict=True)) if i != at)
    assert result.messages[at]["role"] == "system"  # the input is not mutated


def test_apply_summary_refuses_a_non_marker() -> None:
    messages = [{"role": "system", "content": "s"}, user("hello")]
    assert marker_position(messages) is None
    with pytest.raises(ValueError):
        apply_summary(messages, 1, "text", "system")
    with pytest.raises(ValueError):
        apply_summary(messages, 5, "text", "system")


# --- the dev corpus -----------------------------------------------------------------------------


@cache
def corpus_spans() -> tuple[tuple[str, tuple[dict[str, Any], ...]], ...]:
    """The first half of each conversation after its system prompt: what a trim would drop."""
    out = []
    for path in sorted(CORPUS.glob("*.json")):
        messages = json.loads(path.read_text())["messages"]
        out.append((path.stem, tuple(messages[1 : len(messages) // 2 + 1])))
    return tuple(out)


def structural(span: tuple[dict[str, Any], ...]) -> tuple[list[str], list[str]]:
    """The commands and path arguments of the span's tool calls (independent of the regexes)."""
    commands, paths = [], []
    for m in span:
        for c in m.get("tool_calls") or []:
            args = json.loads(c["function"]["arguments"])
            if "command" in args:
                commands.append(normalise(args["command"])[:MAX_FACT_CHARS])
            for key in ("path", "cwd"):
                if key in args:
                    paths.append(args[key])
    return list(dict.fromkeys(commands)), list(dict.fromkeys(paths))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="evaluation corpus not available")
def test_corpus_facts_include_commands_and_paths() -> None:
    for name, span in corpus_spans():
        commands, paths = structural(span)
        assert commands, name
        everything = extract_facts(
            list(span), limit=10_000, quotas={"commands": (10_000, 10_000), "paths": (10**4,) * 2}
        )
        for fact in commands + paths:
            assert covered(fact, everything), (name, fact)
        facts = extract_facts(list(span))
        assert len(facts) <= MAX_FACTS
        kept_commands = [c for c in commands if covered(c, facts)]
        assert len(kept_commands) >= min(len(commands), 8), (name, commands, facts)
        kept_paths = [p for p in paths if covered(p, facts)]
        assert kept_paths or not paths, (name, paths, facts)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="evaluation corpus not available")
def test_summary_room_covers_the_facts_list_of_real_spans() -> None:
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base")
    for name, span in corpus_spans():
        facts = extract_facts(list(span))
        text = summary_message("", facts, role="system", dropped=len(span))["content"]
        assert len(enc.encode(text, disallowed_special=())) <= summary_room(0), name


def test_the_span_is_the_clients_messages_whatever_stage_1_made_of_them():
    """Stage 1 compacts tool results to a share of the window, and the window moves as the
    backend's counts calibrate it: a summary keyed by the compacted span was asked for again
    on every such move (a local model: one new 30 s summary per identical turn)."""
    from proxy.pipeline import compute_budget, shrink
    from tests.pipeline.test_pipeline_invariants import COUNTER

    msgs: list[dict] = [{"role": "system", "content": "sys"}]
    for t in range(30):
        args = json.dumps({"cmd": f"make {t}"})
        call = {"id": f"c{t}", "type": "function", "function": {"name": "run", "arguments": args}}
        log = "\n".join(f"line {i} of build {t}: compiling module_{i}.c" for i in range(120))
        msgs += [
            {"role": "user", "content": f"question {t} " + "lorem ipsum " * 40},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": log},
        ]
    msgs.append({"role": "user", "content": "last"})
    keys = set()
    for window in (16000, 16800, 17600):
        budget = compute_budget(window, 512, default_reserve=256, floor=128, margin_share=0.02)
        plan = shrink(
            msgs, budget=budget, counter=COUNTER, policy=Policy(summary_tokens=600), mode="compact"
        )
        assert plan.report.actions.get("tools") and len(plan.span) == 42
        assert all(a is b for a, b in zip(plan.span, msgs[1:], strict=False))
        keys.add(span_key(plan.span, model="m", settings_fingerprint=""))
    assert len(keys) == 1
