"""Where the pipeline runs: inline for small or already-seen requests, in a worker thread for
large new text (a cold 160 KB conversation takes tens of milliseconds, which inline would stall
every other connection on the event loop)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson

from proxy.pipeline.compact import Compacted
from proxy.settings import Settings
from proxy.shrinker import THREAD_THRESHOLD, CompactMemo, Shrinker
from proxy.tokenizers import Tokenizers


def conversation(seed: str, tool_bytes: int) -> dict[str, Any]:
    line = f"{seed}: collecting package metadata ... done, resolving dependencies\n"
    return {
        "model": "qwen2.5-coder",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Install the project."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "run", "arguments": '{"cmd": "pip install ."}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": line * (tool_bytes // len(line))},
            {"role": "user", "content": f"What failed? ({seed})"},
        ],
    }


class Recording(Shrinker):
    def __init__(self) -> None:
        super().__init__(Settings(context_window=16384), Tokenizers())
        self.tokenizers.for_encoding("cl100k_base")  # as the app's startup does
        self.threads: list[bool] = []
        self.aheads: list[bool] = []

    def plan_sync(self, body, mode, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.append(threading.current_thread() is threading.main_thread())
        self.aheads.append(kwargs.get("ahead", args[2] if len(args) > 2 else True))
        return super().plan_sync(body, mode, *args, **kwargs)


def test_large_new_text_goes_to_a_thread_then_inline_once_seen() -> None:
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)

    async def run() -> None:
        for _ in range(2):
            plan = await shrinker.plan(body, 5 * THREAD_THRESHOLD, "trim")
            assert plan.report.actions.get("tools") == 1

    asyncio.run(run())
    assert shrinker.threads == [False, True]  # cold: worker thread; warm: inline
    assert shrinker.aheads == [True, False]  # only a thread's plan may count ahead


def test_a_cold_request_is_parsed_again_and_planned_in_a_thread() -> None:
    """The route lets go of a cold request's parsed body while it waits for a thread: the
    thread parses the bytes itself, and plans exactly what the parsed body would give."""
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)
    raw = orjson.dumps(body)
    assert shrinker.plan_inline(body, len(raw), "trim") is None  # cold and large: not inline

    parsed, plan = asyncio.run(shrinker.plan_raw(raw, "trim"))
    assert parsed == body
    assert shrinker.threads == [False]
    fresh = Recording().plan_sync(body, "trim")
    assert plan.messages == fresh.messages and plan.report.actions == fresh.report.actions
    # Seen once, the same body is warm: planned inline from then on.
    assert shrinker.plan_inline(body, len(raw), "trim") is not None
    assert shrinker.threads == [False, True]


def test_a_new_turn_with_a_small_new_message_stays_inline() -> None:
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)
    later = {**body, "messages": [*body["messages"], {"role": "user", "content": "And now?"}]}

    async def run() -> None:
        await shrinker.plan(body, 5 * THREAD_THRESHOLD, "trim")
        await shrinker.plan(later, 5 * THREAD_THRESHOLD, "trim")
        other = conversation("b", 4 * THREAD_THRESHOLD)  # same size, new text: a thread again
        await shrinker.plan(other, 5 * THREAD_THRESHOLD, "trim")

    asyncio.run(run())
    assert shrinker.threads == [False, True, False]


def test_small_bodies_never_leave_the_event_loop() -> None:
    shrinker = Recording()
    body = conversation("a", 2048)
    asyncio.run(shrinker.plan(body, 3000, "trim"))
    assert shrinker.threads == [True]


def test_an_encoding_not_loaded_yet_is_loaded_off_the_event_loop() -> None:
    """o200k_base is loaded on first use (startup loads only what the settings name): that
    first request is planned in a thread, later ones inline."""
    shrinker = Recording()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert not shrinker.tokenizers.loaded("gpt-4o")

    async def run() -> None:
        await shrinker.plan(body, 100, "trim")
        await shrinker.plan(body, 100, "trim")

    asyncio.run(run())
    assert shrinker.threads == [False, True]
    assert shrinker.tokenizers.loaded("gpt-4o")


def test_startup_loads_what_the_settings_name() -> None:
    tk = Tokenizers()
    assert tk.startup_encodings([]) == ["cl100k_base"]
    assert tk.startup_encodings(["gpt-4o", "qwen2.5-coder"]) == ["cl100k_base", "o200k_base"]
    assert Tokenizers(override="o200k_base").startup_encodings(["qwen"]) == ["o200k_base"]


def test_loaded_encodings_still_count_exactly() -> None:
    """The Python copy of the ranks is dropped after loading; counting uses the Rust core."""
    counter = Tokenizers().for_model("gpt-4o")
    assert counter.exact
    assert counter.count_text("hello world, this is shrink-proxy") == len(
        counter.encoding.encode_ordinary("hello world, this is shrink-proxy")
    )
    assert counter.encoding.decode(counter.encoding.encode_ordinary("tiktoken")) == "tiktoken"


def test_settle_heap_hides_startup_objects_from_the_collector() -> None:
    import gc

    from proxy.app import settle_heap

    settle_heap()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_stage_one_memo_is_bounded_by_the_text_it_holds() -> None:
    memo = CompactMemo(capacity=1000, max_chars=10_000)
    for i in range(20):
        memo[("tool", i)] = Compacted("x" * 1_000, "log", 900, 300, 3)
    # Ten entries of ~1,200 characters each exceed 10,000: only the newest fit, oldest go first.
    assert memo.chars <= 10_000
    assert ("tool", 19) in memo and ("tool", 0) not in memo
    assert memo.chars == sum(CompactMemo.size_of(v) for v in memo.values())
    memo[("tool", 19)] = None  # replacing an entry re-weighs it
    assert memo.chars == sum(CompactMemo.size_of(v) for v in memo.values())


def test_the_stage_one_memo_is_bounded_by_entries_and_keeps_the_recently_used() -> None:
    memo = CompactMemo(capacity=3)
    for i in range(3):
        memo[i] = ["fact"]
    assert memo[0] == ["fact"]  # a hit makes 0 the most recently used
    memo[3] = None
    assert list(memo) == [2, 0, 3]


def test_one_entry_larger_than_the_bound_is_still_kept_until_the_next() -> None:
    memo = CompactMemo(capacity=10, max_chars=100)
    memo["a"] = Compacted("y" * 5_000, "text", 2_000, 1_000, 0)
    assert "a" in memo  # the request that made it reads it back on its next turn
    memo["b"] = None
    assert list(memo) == ["b"]


def trimmed_conversation() -> dict[str, Any]:
    """A conversation a 4k window must trim, with facts to list for the dropped span."""
    body = conversation("m", 3 * THREAD_THRESHOLD)
    for i in range(6):
        body["messages"] += [
            {"role": "assistant", "content": f"Step {i}: running the tests again."},
            {
                "role": "user",
                "content": f"FAILED tests/test_{i}.py::test_it - assert {i} == 0\n" * 40,
            },
        ]
    return body


def test_the_memo_changes_no_plan_and_is_kept_per_encoding() -> None:
    def fresh(model: str) -> Any:
        body = {**trimmed_conversation(), "model": model}
        return Shrinker(Settings(context_window=4096), Tokenizers()).plan_sync(body, "trim")

    shared = Shrinker(Settings(context_window=4096), Tokenizers())
    for model in ("qwen2.5-coder", "gpt-4o", "qwen2.5-coder", "gpt-4o"):  # cl100k, o200k, again
        plan = shared.plan_sync({**trimmed_conversation(), "model": model}, "trim")
        expected = fresh(model)
        assert plan.messages == expected.messages and plan.report == expected.report, model
        assert plan.report.actions.get("trim") and plan.report.actions.get("facts")
    # One stage-1 result and one facts text per encoding: the two encodings count differently.
    kinds = [key[0] for key in shared.memo if isinstance(key, tuple)]
    assert kinds.count("tool") == 2 and kinds.count("facts-text") >= 2


def long_session(turns: int = 40) -> list[dict[str, Any]]:
    full: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        full.append({"role": "user", "content": f"Question {i}: " + "why is it slow? " * 40})
        full.append({"role": "assistant", "content": f"Answer {i}: " + "it allocates. " * 50})
    return full


def cut_of(plan: Any) -> int:
    """Where the kept history resumes (0: nothing dropped)."""
    return next((d.index for d in plan.report.details if d.stage == "trim"), 0)


def test_remembered_replays_change_no_plan_across_turns() -> None:
    """Stage 2's replay memo: a shared shrinker seeing each turn of a growing conversation at
    one completion reserve plans exactly what a fresh one plans, for each reserve."""
    full = long_session()
    cuts = set()
    for max_tokens in (None, 3000, 256, 1500):
        shared = Shrinker(Settings(context_window=8192), Tokenizers())
        for turn in range(41, len(full) + 1, 2):
            body: dict[str, Any] = {"model": "m", "messages": full[:turn]}
            if max_tokens:
                body["max_tokens"] = max_tokens
            plan = shared.plan_sync(body, "trim")
            expected = Shrinker(Settings(context_window=8192), Tokenizers()).plan_sync(body, "trim")
            assert plan.messages == expected.messages, (turn, max_tokens)
            assert plan.report == expected.report
            cuts.add((max_tokens, plan.report.actions.get("trim")))
        assert any(isinstance(k, tuple) and k[0] == "replay" for k in shared.memo)
    assert len(cuts) > 8  # the budgets really cut in different places


def test_a_budget_that_moves_between_turns_never_moves_the_cut_back() -> None:
    """The replay is not monotone in the budget: planned fresh, a slightly smaller budget can
    keep more history. A budget that drifts between turns (calibration, a client varying
    max_tokens) must still never move the cut towards the front: each move back is a full
    re-read by the backend. The cut the conversation was last sent with is its floor."""
    full = long_session(60)
    shared = Shrinker(Settings(context_window=8192), Tokenizers())
    reserves = [256, 1900, 700, 3000, 1200, 2500, 400, 1700]
    kept, fresh_back = 0, 0
    last_fresh = 0
    for i, turn in enumerate(range(41, len(full) + 1, 2)):
        for j in range(2):  # the same request twice, with another budget
            body = {"model": "m", "messages": full[:turn], "max_tokens": reserves[(i + j) % 8]}
            plan = shared.plan_sync(body, "trim")
            assert plan.report.fits
            cut = cut_of(plan)
            assert cut >= kept, (turn, body["max_tokens"], cut, kept)
            kept = cut
            alone = Shrinker(Settings(context_window=8192), Tokenizers())
            fresh = cut_of(alone.plan_sync(body, "trim"))
            fresh_back += fresh < last_fresh
            last_fresh = fresh
    assert fresh_back > 0  # planned without the floor, these budgets do move the cut back
    assert kept > 0


def test_cache_bounds_come_from_the_settings() -> None:
    from proxy.app import build_tokenizers

    settings = Settings(token_cache_size=3, memo_mb=0.5)
    counter = build_tokenizers(settings).for_model("qwen")
    for i in range(10):
        counter.count_message({"role": "user", "content": f"message {i}"})
    assert counter.cache_info().size == 3
    assert Shrinker(settings, Tokenizers()).memo.max_chars == 500_000


def test_a_request_whose_compactions_were_evicted_goes_to_a_thread() -> None:
    """Warm by its counts, cold by its stage-1 results: compacting them again is as costly as
    counting new text, so it must not run on the event loop."""
    shrinker = Recording()
    body = conversation("a", 4 * THREAD_THRESHOLD)
    raw = orjson.dumps(body)
    first = shrinker.plan_sync(body, "trim")
    assert shrinker.plan_inline(body, len(raw), "trim") is not None  # warm: inline
    shrinker.memo.max_chars = 1  # other tool results push this one out
    for i in range(3):
        shrinker.plan_sync(conversation(f"other {i}", 4 * THREAD_THRESHOLD), "trim")
    assert shrinker.plan_inline(body, len(raw), "trim") is None  # every count cached, but cold
    parsed, again = asyncio.run(shrinker.plan_raw(raw, "trim"))
    assert again.messages == first.messages and again.report == first.report
    assert shrinker.threads == [True, True, True, True, True, False]


def test_the_window_shares_come_from_the_settings() -> None:
    """A tool result of ~900 tokens in an 8k window: cut to a twentieth of the window by
    default, left whole when SHRINK_TOOL_WINDOW_SHARE allows an eighth."""
    body = conversation("share", 3600)
    tool = body["messages"][3]["content"]

    def tool_after(**shares: int) -> str:
        shrinker = Shrinker(Settings(context_window=8192, **shares), Tokenizers())
        assert shrinker.policy.facts_window_share == shares.get("facts_window_share", 80)
        plan = shrinker.plan_sync(body, "tools")
        return str(plan.messages[3]["content"])

    assert 500 < Tokenizers().for_model("qwen2.5-coder").count_text(tool) < 1024
    assert tool_after() != tool  # cut to 409 tokens
    assert tool_after(tool_window_share=8, facts_window_share=20) == tool


def test_requests_whose_values_python_hashes_alike_get_their_own_plans() -> None:
    """Issue 20: counts, replays and facts were cached under keys built on Python's hash(), so
    a message whose content is 2**61 (hashed as 1), -2 (as -1) or 1.0 was served the count, and
    the conversation the cut, of another. Every plan is now the one a fresh shrinker makes."""
    shared = Shrinker(Settings(context_window=4096), Tokenizers())
    for value in (1, 2**61, -1, -2, 1.0, True):
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
        for i in range(30):
            messages.append({"role": "user", "content": f"Question {i}: " + "why? " * 60})
            messages.append({"role": "assistant", "content": f"Answer {i}: " + "because. " * 60})
        messages.append({"role": "user", "content": value})  # a client's junk, counted as JSON
        body = {"model": "qwen2.5-coder", "messages": messages}
        plan = shared.plan_sync(body, "trim")
        alone = Shrinker(Settings(context_window=4096), Tokenizers()).plan_sync(body, "trim")
        assert plan.report == alone.report, value
        assert plan.messages == alone.messages


def test_the_newest_messages_stay_and_a_long_document_among_them_is_cut_head_and_tail() -> None:
    """Issue 20: SHRINK_KEEP_LAST=4 said the last four messages are never trimmed away, yet
    [system, a 28k-token document, the reply, a question] at 8k went out as system, marker and
    question (28,057 -> 52 tokens). The four stay now; the document is cut in its middle."""
    doc = "\n".join(
        f"{i:05d} Section {i}: the quick brown fox jumps over the lazy dog." for i in range(1750)
    )
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Here is the document:\n{doc}"},
        {"role": "assistant", "content": "I have read it. Ask me anything about it."},
        {"role": "user", "content": "What does section 1200 say?"},
    ]
    body = {"model": "qwen2.5-coder", "messages": messages}
    plan = Shrinker(Settings(context_window=8192), Tokenizers()).plan_sync(body, "trim")
    report = plan.report
    assert report.fits and report.tokens_before > 28_000
    assert report.budget * 0.8 < report.tokens_after <= report.budget
    assert report.actions == {"truncate": 1}
    assert [m["role"] for m in plan.messages] == ["system", "user", "assistant", "user"]
    assert plan.messages[0] is messages[0] and plan.messages[2:] == messages[2:]
    kept = plan.messages[1]["content"]
    assert kept.startswith(messages[1]["content"][:500]) and kept.endswith(doc[-500:])
    assert "omitted by shrink-proxy" in kept


def test_a_long_session_is_never_planned_inline_however_warm() -> None:
    """Issue 20: a 4,000-message session warm by its counts but not by its memo (evicted) was
    planned inline: 9.2 s on the event loop. Past INLINE_MAX_MESSAGES it goes to a thread."""
    from proxy.shrinker import INLINE_MAX_MESSAGES

    shrinker = Recording()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    for i in range(2000):
        messages += [
            {"role": "user", "content": f"step {i}: " + "word " * 20},
            {"role": "assistant", "content": f"done {i}"},
        ]
    body = {"model": "qwen2.5-coder", "messages": messages}
    raw_size = len(orjson.dumps(body))
    assert len(messages) > INLINE_MAX_MESSAGES
    first = shrinker.plan_sync(body, "trim")
    shrinker.memo.clear()  # evicted: counts cached, compactions and facts not
    assert shrinker.plan_inline(body, raw_size, "trim") is None
    again = asyncio.run(shrinker.plan(body, raw_size, "trim"))
    assert again.messages == first.messages
    assert shrinker.threads[-1] is False  # planned off the main thread


def test_the_small_window_floors_come_from_the_settings() -> None:
    default = Shrinker(Settings(), Tokenizers()).policy
    assert (default.trim_keep_tokens, default.facts_min_tokens) == (1024, 100)
    policy = Shrinker(Settings(trim_keep_tokens=0, facts_min_tokens=0), Tokenizers()).policy
    assert (policy.trim_keep_tokens, policy.facts_min_tokens) == (0, 0)
