"""The summarizer's I/O half against a fake summarizer model over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from proxy.pipeline.summary import FACTS_TITLE, summary_body, summary_request
from proxy.summarizer import LRUSummaryCache, Pace, Summarizer, SummaryOutcome
from tests.fakes.server import serve
from tests.fakes.summarizer import FakeSummarizer

T = TypeVar("T")


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeSummarizer]:
    fake = FakeSummarizer()
    with serve(fake.app()) as url:
        fake.url = url + "/v1"
        yield fake


@pytest.fixture
def fake(fake_model: FakeSummarizer) -> FakeSummarizer:
    fake_model.reset()
    return fake_model


def run(test: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Run `test(client)` in a fresh event loop with a fresh loopback client."""

    async def main() -> T:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await test(client)

    return asyncio.run(main())


def summarizer(client: httpx.AsyncClient, fake: FakeSummarizer, **kw: Any) -> Summarizer:
    kw.setdefault("model", None)
    kw.setdefault("api_key", "sk-summary")
    kw.setdefault("timeout", 10.0)
    return Summarizer(client, fake.url, **kw)


def call(command: str, id_: str) -> dict[str, Any]:
    args = json.dumps({"command": command})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": "run_command", "arguments": args}}
        ],
    }


def conversation(turns: int) -> list[dict[str, Any]]:
    """A user request, then `turns` command/result pairs with distinct commands and errors."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "Get ~/web/package.json installing."}]
    for i in range(turns):
        out.append(call(f"npm install step-{i}", f"c{i}"))
        out.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"added {i} packages\nnpm error code E{i:03d} in step {i}\n[exit: 1]",
            }
        )
    return out


async def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_model_answer_then_cache_hit_with_identical_text(fake: FakeSummarizer) -> None:
    span = conversation(3)

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome]:
        s = summarizer(client, fake)
        assert s.cached(span, request_model="client-model") is None
        first = await s.summarize(span, request_model="client-model")
        second = await s.summarize([dict(m) for m in span], request_model="client-model")
        assert s.cached(span, request_model="client-model") == first.text
        assert s.cached(span, request_model="other-model") is None
        return first, second

    first, second = run(test)
    assert first.source == "model" and first.error is None
    assert second.source == "cache"
    assert second.text == first.text
    assert len(fake.requests) == 1  # the second turn asked nobody
    body, headers = fake.requests[0], fake.headers[0]
    assert body["model"] == "client-model" and body["stream"] is False
    assert body["max_tokens"] == 600
    assert headers["authorization"] == "Bearer sk-summary"
    assert first.text is not None
    assert first.text.startswith("[shrink-proxy: summary of 7 earlier messages]\n")
    # The fake keeps the first line of each entry: every command made it into the summary.
    assert '-> run_command({"command":"npm install step-2"})' in first.text


def test_configured_model_wins_and_client_auth_is_used_without_a_key(
    fake: FakeSummarizer,
) -> None:
    async def test(client: httpx.AsyncClient) -> SummaryOutcome:
        s = summarizer(client, fake, model="small-summarizer", api_key=None)
        return await s.summarize(conversation(1), request_model="big", authorization="Bearer cli")

    outcome = run(test)
    assert outcome.source == "model"
    assert fake.requests[0]["model"] == "small-summarizer"
    assert fake.headers[0]["authorization"] == "Bearer cli"


def test_facts_the_summary_lost_are_appended(fake: FakeSummarizer) -> None:
    fake.content = "<think>let me see</think>Task: install the web app. npm install step-0 ran."
    span = conversation(2)

    outcome = run(lambda client: summarizer(client, fake).summarize(span, request_model="m"))
    assert outcome.source == "model" and outcome.text is not None
    body, facts = outcome.text.split(f"\n\n{FACTS_TITLE}\n")
    assert body.endswith("Task: install the web app. npm install step-0 ran.")
    assert "<think>" not in outcome.text
    bullets = facts.splitlines()
    assert "- npm error code E000 in step 0" in bullets
    assert "- npm install step-1" in bullets
    assert "- npm install step-0" not in bullets  # the summary kept it
    assert outcome.facts_added == len(bullets)


def test_timeout_returns_early_and_the_background_call_fills_the_cache(
    fake: FakeSummarizer,
) -> None:
    fake.delay = 1.5
    span = conversation(2)

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, float, SummaryOutcome]:
        cache = LRUSummaryCache()
        s = summarizer(client, fake, timeout=0.2, cache=cache)
        began = time.monotonic()
        first = await s.summarize(span, request_model="m")
        elapsed = time.monotonic() - began
        assert s.pending == 1
        # The task fills the cache, then its done-callback (next loop turn) clears `pending`.
        await wait_until(lambda: len(cache) == 1 and s.pending == 0)
        later = await s.summarize(span, request_model="m")
        return first, elapsed, later

    first, elapsed, later = run(test)
    assert first.source == "timeout" and first.text is None
    # Bounded by the timeout, not by the summarizer (which takes 1.5 s).
    assert elapsed < 1.0
    assert later.source == "cache" and later.text is not None
    assert len(fake.requests) == 1


def test_concurrent_calls_for_one_span_share_one_request(fake: FakeSummarizer) -> None:
    fake.delay = 0.3
    span = conversation(2)

    async def test(client: httpx.AsyncClient) -> list[SummaryOutcome]:
        s = summarizer(client, fake)
        return await asyncio.gather(*(s.summarize(span, request_model="m") for _ in range(6)))

    outcomes = run(test)
    assert len(fake.requests) == 1
    assert {o.source for o in outcomes} == {"model"}
    assert len({o.text for o in outcomes}) == 1


@pytest.mark.parametrize(
    ("knob", "value", "source"),
    [
        ("status", 500, "error"),
        ("status", 401, "error"),
        ("garbage", b"<html>bad gateway</html>", "error"),
        ("garbage", b'{"choices": []}', "error"),
        ("garbage", b'{"choices": [{"message": {"content": 42}}]}', "error"),
        ("content", "", "empty"),
        ("content", "<think>only reasoning, then max_tokens ran out", "empty"),
    ],
)
def test_bad_answers_give_an_outcome_not_an_exception(
    fake: FakeSummarizer, knob: str, value: Any, source: str
) -> None:
    setattr(fake, knob, value)
    span = conversation(1)

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome]:
        s = summarizer(client, fake)
        return await s.summarize(span, request_model="m"), await s.summarize(
            span, request_model="m"
        )

    first, second = run(test)
    assert (first.source, first.text) == (source, None)
    assert first.error
    assert second.source == source  # quick failures are not remembered: the next turn asks again
    assert len(fake.requests) == 2


def test_unreachable_summarizer_is_an_error_outcome() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes

    async def test(client: httpx.AsyncClient) -> SummaryOutcome:
        s = Summarizer(client, f"http://127.0.0.1:{port}/v1", model="m", api_key=None, timeout=5.0)
        return await s.summarize(conversation(1), request_model=None)

    outcome = run(test)
    assert outcome.source == "error" and outcome.error and "unreachable" in outcome.error


def test_no_model_and_empty_span(fake: FakeSummarizer) -> None:
    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome]:
        s = summarizer(client, fake)
        return (
            await s.summarize(conversation(1), request_model=None),
            await s.summarize([], request_model="m"),
        )

    no_model, empty = run(test)
    assert no_model.source == "error" and empty.source == "empty"
    assert fake.requests == []


def test_incremental_summary_sends_only_new_messages(fake: FakeSummarizer) -> None:
    history = conversation(8)
    old, new = history[:7], history[:17]

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome]:
        s = summarizer(client, fake)
        return await s.summarize(old, request_model="m"), await s.summarize(new, request_model="m")

    first, second = run(test)
    assert first.source == "model" and not first.incremental
    assert second.source == "model" and second.incremental
    assert first.text is not None and second.text is not None
    assert second.text.startswith("[shrink-proxy: summary of 17 earlier messages]\n")
    prompt = fake.prompts[1]
    assert f"<previous_note>\n{summary_body(first.text).strip()}\n</previous_note>" in prompt
    transcript = prompt.split("<transcript>", 1)[1]
    assert "npm install step-2" not in transcript  # covered by the previous note
    assert "npm install step-3" in transcript and "npm install step-7" in transcript
    full = summary_request(new, model="m", previous=None, max_tokens=600)
    assert len(transcript) < len(full["messages"][0]["content"].split("<transcript>", 1)[1])
    # The updated note still carries what the old one knew.
    assert "npm install step-0" in second.text and "npm install step-7" in second.text


def test_aclose_cancels_background_calls(fake: FakeSummarizer) -> None:
    fake.delay = 5.0

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome, int]:
        cache = LRUSummaryCache()
        s = summarizer(client, fake, timeout=0.1, cache=cache)
        first = await s.summarize(conversation(1), request_model="m")
        await s.aclose()
        after = await s.summarize(conversation(2), request_model="m")
        return first, after, s.pending + len(cache)

    first, after, left = run(test)
    assert first.source == "timeout"
    assert after.source == "error" and after.error == "summarizer closed"
    assert left == 0


def test_calls_in_flight_are_bounded(fake: FakeSummarizer) -> None:
    fake.delay = 1.0

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome]:
        s = summarizer(client, fake, timeout=0.1, max_pending=1)
        first = await s.summarize(conversation(1), request_model="m")
        second = await s.summarize(conversation(2), request_model="m")
        await s.aclose()
        return first, second

    first, second = run(test)
    assert first.source == "timeout"
    assert second.source == "error" and second.error == "too many summaries in flight"
    assert len(fake.requests) <= 1  # the second was never sent (the first may be cut by aclose)


def test_concurrent_callers_after_the_first_are_marked_joined(fake: FakeSummarizer) -> None:
    fake.delay = 0.3
    made: list[tuple[str, float]] = []

    async def test(client: httpx.AsyncClient) -> list[SummaryOutcome]:
        s = summarizer(client, fake, on_made=lambda result, seconds: made.append((result, seconds)))
        return await asyncio.gather(
            *(s.summarize(conversation(2), request_model="m") for _ in range(4))
        )

    outcomes = run(test)
    assert [o.joined for o in outcomes] == [False, True, True, True]
    assert len(made) == 1 and made[0][0] == "ok" and made[0][1] >= 0.3


def test_pace_is_a_moving_average_per_model() -> None:
    pace = Pace(weight=0.5)
    assert pace.expected("m") is None
    pace.record("m", 10.0)
    pace.record("m", 20.0)
    pace.record("other", 1.0)
    assert pace.expected("m") == 15.0 and pace.expected("other") == 1.0


def test_a_summarizer_known_to_be_slow_is_not_waited_for(fake: FakeSummarizer) -> None:
    fake.delay = 0.5

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, float, SummaryOutcome]:
        s = summarizer(client, fake, timeout=0.2)
        s.pace.record("m", 0.5)  # as a finished summary would have
        began = time.monotonic()
        first = await s.summarize(conversation(2), request_model="m")
        elapsed = time.monotonic() - began
        await wait_until(lambda: s.pending == 0)
        later = await s.summarize(conversation(2), request_model="m")
        return first, elapsed, later

    first, elapsed, later = run(test)
    assert first.source == "deferred" and first.text is None
    assert elapsed < 0.1
    assert later.source == "cache" and later.text is not None
    assert len(fake.requests) == 1


def test_a_deferred_call_waits_for_its_hold(fake: FakeSummarizer) -> None:
    async def test(client: httpx.AsyncClient) -> tuple[int, int]:
        s = summarizer(client, fake, timeout=0.2)
        s.pace.record("m", 1.0)
        release = asyncio.Event()
        outcome = await s.summarize(conversation(2), request_model="m", hold=release.wait)
        assert outcome.source == "deferred"
        await asyncio.sleep(0.3)
        before = len(fake.requests)
        release.set()
        await wait_until(lambda: s.pending == 0)
        return before, len(fake.requests)

    assert run(test) == (0, 1)


def test_summary_cache_is_bounded_by_characters() -> None:
    cache = LRUSummaryCache(capacity=100, max_chars=25)
    for i in range(5):
        cache.put(f"k{i}", "x" * 10)
    assert len(cache) == 2 and cache.chars == 20
    assert cache.get("k4") is not None and cache.get("k0") is None
    cache.put("big", "y" * 100)  # alone over the bound: kept, as the only entry
    assert len(cache) == 1
    assert cache.info() == (1, 1, 1)


def test_a_slowly_failed_span_is_not_asked_again_at_once(fake: FakeSummarizer) -> None:
    """A summarizer that fails after longer than the timeout (a prompt over its window, say)
    is not asked for the same span on every turn; its slowness still counts."""
    fake.status, fake.delay = 400, 0.3

    async def test(client: httpx.AsyncClient) -> tuple[SummaryOutcome, SummaryOutcome, Any]:
        s = summarizer(client, fake, timeout=0.2)
        first = await s.summarize(conversation(2), request_model="m")
        await wait_until(lambda: s.pending == 0)
        second = await s.summarize(conversation(2), request_model="m")
        return first, second, s.pace.expected("m")

    first, second, pace = run(test)
    assert first.source == "timeout" and second.source == "error"
    assert second.error is not None and "asked again in" in second.error
    assert len(fake.requests) == 1
    assert pace is not None and pace >= 0.3
