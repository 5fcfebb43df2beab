"""One forward read of a span's messages picks, for every prefix, what picking that prefix alone
picks (proxy.pipeline.span_facts), and stage 2's lists come from it (proxy.pipeline.notes)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.pipeline import facts
from proxy.pipeline.notes import Notes
from proxy.pipeline.span_facts import SpanFacts
from tests.pipeline import facts_reference as reference
from tests.pipeline.test_facts_fast import QUOTAS, conversations, messages, needs_corpus


def read(span: list[Any], quotas: Any = facts.CATEGORIES, limit: int = facts.MAX_FACTS) -> Any:
    state = SpanFacts(quotas, limit)
    for message in span:
        state.add(facts.message_facts(message, quotas))
    return state


def assert_every_prefix(
    span: list[Any], ks: Any, quotas: Any = None, limit: int = 40, plain: Any = None
) -> None:
    """The pick of each prefix k from one read of `span` is `plain`'s pick of span[:k] alone
    (default: the frozen line-by-line reference; the listed order, extract_facts')."""
    quotas = facts.CATEGORIES if quotas is None else quotas
    plain = plain or reference.extract_facts
    state = read(span, quotas, limit)
    for k in ks:
        picked = state.select(k)
        assert picked.kept == plain(span[:k], limit=limit, quotas=quotas), k
        assert facts.ordered(picked, quotas) == facts.extract_facts(
            span[:k], limit=limit, quotas=quotas
        )


def fresh_pick(span: list[Any], *, limit: int, quotas: Any) -> list[str]:
    return facts._select(span, limit, quotas).kept


@needs_corpus
def test_every_prefix_of_a_long_session_picks_what_the_prefix_alone_picks() -> None:
    """Against a fresh pick of each prefix (itself the reference's: test_facts_fast), since the
    reference reads the corpus's long outputs line by line."""
    session = [m for ms in conversations() for m in ms if m.get("role") != "system"]
    assert_every_prefix(session, [*range(0, len(session), 23), len(session)], plain=fresh_pick)
    for ms in conversations():
        assert_every_prefix(ms, [*range(0, len(ms), 3), len(ms)], limit=7, plain=fresh_pick)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(messages(), min_size=1, max_size=8), st.sampled_from(QUOTAS), st.sampled_from([40, 7])
)
def test_every_prefix_of_generated_spans(span: list[Any], quotas: Any, limit: int) -> None:
    assert_every_prefix(span, range(len(span) + 1), quotas, limit)


def tool(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c", "content": text}


def test_a_category_keeps_a_bounded_list() -> None:
    """Ten thousand distinct paths: the pick reads the first few, so only those are kept."""
    span = [tool(f"cat /src/pkg{i}/mod{i}.py\n") for i in range(10_000)]
    state = read(span)
    quota = facts.CATEGORIES["paths"][0]
    assert len(state._lists["paths"]) == quota + 2 * facts.MAX_FACTS
    assert state.memo_chars < 200_000
    assert facts.ordered(state.select(len(span))) == facts.extract_facts(span)


def test_a_copy_is_extended_and_the_original_is_not() -> None:
    first = [tool("E   AssertionError: assert 1 == 2\n1 failed in 0.1s\n")]
    later = [tool("ERROR: Could not build wheels for demo\n")]
    state = read(first)
    before = state.select(1)
    copy = state.copy()
    copy.add(facts.message_facts(later[0]))
    assert state.length == 1 and state.select(1) == before
    assert copy.select(2).kept == reference.extract_facts(first + later)


def test_a_fact_partial_in_a_later_message_is_partial_for_the_spans_that_hold_it() -> None:
    long = "Successfully installed " + " ".join(f"package{i}-{i}.0.1" for i in range(40))
    clipped = facts._clip(long)
    span = [tool(f"Collecting a\n{clipped}\n"), tool("ok\n"), tool(f"Collecting b\n{long}\n")]
    state = read(span)
    assert clipped not in state.select(2).partial
    assert clipped in state.select(3).partial


def count(text: str) -> int:
    return len(text) // 4 + 1


def key(message: Any) -> bytes:
    return repr(message).encode()


def test_a_next_turn_reads_only_what_no_turn_read_and_lists_the_same() -> None:
    span = [tool(f"src/m{i}.py:{i}: error: bad {i}\n{i} failed in 0.{i}s\n") for i in range(60)]
    memo: dict[Any, Any] = {}
    first = Notes(span[:40], 0, count, 120, key_of=key, memo=memo)
    texts = [first.text(k) for k in (10, 30, 20)]
    first.save()
    (stored,) = [v for k, v in memo.items() if k[0] == "facts-state"]
    assert stored.length == 30
    later = Notes(span, 0, count, 120, key_of=key, memo=memo)
    assert [later.text(k) for k in (10, 30, 20)] == texts  # remembered lists
    fresh = Notes(span, 0, count, 120)
    assert later.text(50) == fresh.text(50) and later.text(25) == fresh.text(25)
    assert later._state is not stored and stored.length == 30  # stored states never change
    later.save()
    assert any(k[0] == "facts-state" and v.length == 50 for k, v in memo.items())
