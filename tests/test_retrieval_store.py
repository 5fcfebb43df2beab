"""The embedded retrieval store's three bounds (entries, bytes in memory, age) and the reason a
ref it let go of is gone."""

from __future__ import annotations

import sys

import pytest

from proxy.retrieval.store import Gone, MemoryStore


def test_bytes_are_memory_not_characters():
    """Text of 4-byte characters (any tool can print it) counts four times its length, so the
    bound holds for the memory the store takes."""
    wide = "\U0001f600" * 1000
    assert sys.getsizeof(wide) > 4000
    store = MemoryStore(max_bytes=10_000)
    store.put_sync({"a" * 24: wide, "b" * 24: wide})
    assert len(store) == 2 and store.bytes == 2 * sys.getsizeof(wide)
    store.put_sync({"c" * 24: wide})  # three would take 12 KB: the oldest goes
    assert len(store) == 2 and store.bytes <= 10_000
    with pytest.raises(Gone, match="evicted to make room .*10,000 bytes"):
        store.get_sync("a" * 24)
    assert store.info()["bytes"] == store.bytes


def test_a_text_larger_than_the_store_is_not_kept():
    store = MemoryStore(max_bytes=1000)
    store.put_sync({"a" * 24: "x" * 2000})
    assert len(store) == 0 and store.bytes == 0
    with pytest.raises(Gone, match="not held"):
        store.get_sync("a" * 24)


def test_entries_and_age_bound_too_and_a_put_again_is_counted_once():
    now = [0.0]
    store = MemoryStore(max_items=2, ttl=10.0, clock=lambda: now[0])
    store.put_sync({"a" * 24: "one", "b" * 24: "two"})
    store.put_sync({"b" * 24: "two"})
    assert store.bytes == sys.getsizeof("one") + sys.getsizeof("two")
    store.put_sync({"c" * 24: "three"})
    assert "a" * 24 not in store and len(store) == 2
    now[0] = 11.0
    with pytest.raises(Gone, match="expired"):
        store.get_sync("b" * 24)
    assert store.bytes == 0
