"""proxy.tokens and proxy.tokenizers against real encodings from the offline cache."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy import pieces
from proxy import tokenizers as loading
from proxy.tokenizers import Tokenizers, resolve_cache_dir
from proxy.tokens import (
    AUDIO_TOKENS,
    IMAGE_TOKENS,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TokenCounter,
    encoding_for_model,
    estimate_tokens,
    fits_by_bytes,
    upper_bound_bytes,
)
from tests.shared_dir import CORPUS, TIKTOKEN_CACHE

CACHE_DIR = os.environ.get("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))


@pytest.fixture(scope="module")
def tokenizers() -> Tokenizers:
    return Tokenizers(cache_dir=CACHE_DIR)


@pytest.fixture(scope="module")
def o200k(tokenizers: Tokenizers) -> TokenCounter:
    counter = tokenizers.for_model("gpt-4o")
    assert counter.exact, f"{CACHE_DIR} lacks o200k_base: run with TIKTOKEN_CACHE_DIR set"
    return counter


@pytest.fixture
def fresh(o200k: TokenCounter) -> TokenCounter:
    """A counter with its own empty cache, sharing the loaded encoding."""
    return TokenCounter(o200k.name, o200k.encoding)


def enc_len(counter: TokenCounter, text: str) -> int:
    assert counter.encoding is not None
    return len(counter.encoding.encode_ordinary(text))


# --- model -> encoding


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("azure/gpt-4o", "o200k_base"),
        ("GPT-4o", "o200k_base"),
        ("ft:gpt-4o-mini-2024-07-18:org::abc", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano-2025-04-14", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-5.1", "o200k_base"),
        ("openrouter/openai/gpt-5-codex", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o1-2024-12-17", "o200k_base"),
        ("o3", "o200k_base"),
        ("o3-pro", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-oss:20b", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("qwen2.5-coder:32b", "cl100k_base"),
        ("llama3.1:8b", "cl100k_base"),
        ("mistral-small", "cl100k_base"),
        ("ollama/qwen3", "cl100k_base"),
        ("o10", "cl100k_base"),
        ("omni", "cl100k_base"),
        ("", "cl100k_base"),
        (None, "cl100k_base"),
    ],
)
def test_encoding_for_model(model: str | None, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_for_model_shares_one_counter_per_encoding(tokenizers: Tokenizers) -> None:
    a = tokenizers.for_model("gpt-4o")
    assert tokenizers.for_model("openai/gpt-5-mini") is a
    assert a.name == "o200k_base" and a.exact
    b = tokenizers.for_model("qwen3")
    assert tokenizers.for_model(None) is b
    assert b.name == "cl100k_base" and b.exact and b is not a


@pytest.mark.parametrize(
    ("override", "name"),
    [("o200k_base", "o200k_base"), ("cl100k_base", "cl100k_base"), ("gpt-4o", "o200k_base")],
)
def test_override_wins(override: str, name: str) -> None:
    other = "qwen3" if name == "o200k_base" else "gpt-4o"
    counter = Tokenizers(override=override, cache_dir=CACHE_DIR).for_model(other)
    assert (counter.name, counter.exact) == (name, True)


def test_override_estimate_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    counter = Tokenizers(override="estimate", cache_dir=CACHE_DIR).for_model("gpt-4o")
    assert (counter.name, counter.exact) == ("estimate", False)
    assert not caplog.records


@pytest.mark.skipif(
    "TIKTOKEN_CACHE_DIR" not in os.environ, reason="tiktoken's own loader would go to the network"
)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_our_copy_of_the_encoding_matches_tiktoken(name: str) -> None:
    # We build encodings from our cache dir with a copy of tiktoken's constructor arguments.
    spec = loading._SPECS[name]
    reference = getattr(openai_public, name)()
    assert spec.pat_str == reference["pat_str"]
    assert dict(spec.special_tokens) == reference["special_tokens"]
    assert (
        loading._cache_key(spec.url)
        == {
            "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
            "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
        }[name]
    )
    ours = Tokenizers(cache_dir=CACHE_DIR).for_encoding(name).encoding
    assert ours is not None
    text = "Hello, wörld! def f(x): return x**2  # 数字 123456 \n\n\t<|endoftext|>"
    assert ours.encode_ordinary(text) == tiktoken.get_encoding(name).encode_ordinary(text)


# --- exact counts


@pytest.mark.parametrize(
    ("model", "text", "expected"),
    [
        ("gpt-4o", "", 0),
        ("gpt-4o", "hello world", 2),
        ("gpt-4", "hello world", 2),
        ("gpt-4", "tiktoken is great!", 6),
        ("gpt-4o", "tiktoken is great!", 6),
        # special tokens are plain text: never raises, never a single special id
        ("gpt-4o", "<|endoftext|>", 7),
        ("gpt-4", "<|endoftext|>", 7),
    ],
)
def test_count_text_exact(tokenizers: Tokenizers, model: str, text: str, expected: int) -> None:
    counter = tokenizers.for_model(model)
    assert counter.count_text(text) == expected
    assert counter.count_text(text) == enc_len(counter, text)


def test_count_text_long_is_cached_and_exact(fresh: TokenCounter) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 100
    expected = enc_len(fresh, text)
    assert fresh.count_text(text) == expected
    assert fresh.count_text(text) == expected
    assert fresh.cache_info() == (1, 1, 1)
    fresh.count_text("short")  # below the threshold: not cached
    assert fresh.cache_info() == (1, 1, 1)


def test_lone_surrogate_does_not_raise(o200k: TokenCounter) -> None:
    assert o200k.count_text("a\ud800b") > 0
    assert o200k.count_message({"role": "user", "content": "x\udfff"}) > TOKENS_PER_MESSAGE


# --- messages: every shape


def msg_cost(counter: TokenCounter, *texts: str) -> int:
    return TOKENS_PER_MESSAGE + sum(enc_len(counter, t) for t in texts)


def test_cookbook_example(o200k: TokenCounter) -> None:
    # openai-cookbook "How to count tokens": role and content encoded, 3 per message, 3 priming.
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "hello world"},
    ]
    expected = msg_cost(o200k, "system", "You are a helpful assistant.")
    expected += msg_cost(o200k, "user", "hello world") + REPLY_PRIMING
    assert o200k.count_messages(messages) == expected


def test_name_costs_one_more(o200k: TokenCounter) -> None:
    plain = o200k.count_message({"role": "user", "content": "hi"})
    named = o200k.count_message({"role": "user", "content": "hi", "name": "alice"})
    assert named == plain + enc_len(o200k, "alice") + 1


def test_content_none_and_missing(o200k: TokenCounter) -> None:
    assert o200k.count_message({"role": "assistant", "content": None}) == msg_cost(
        o200k, "assistant"
    )
    assert o200k.count_message({"role": "assistant"}) == msg_cost(o200k, "assistant")


def test_content_parts(o200k: TokenCounter) -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10_000}},
            {"type": "input_audio", "input_audio": {"data": "B" * 10_000, "format": "wav"}},
            {"type": "text", "text": "And this sound?"},
        ],
    }
    expected = msg_cost(o200k, "user", "What is in this image?", "And this sound?")
    assert o200k.count_message(message) == expected + IMAGE_TOKENS + AUDIO_TOKENS


def test_unknown_part_counted_by_json(o200k: TokenCounter) -> None:
    part = {"type": "video", "frames": [1, 2, 3]}
    message = {"role": "user", "content": [part]}
    assert o200k.count_message(message) == msg_cost(
        o200k, "user", '{"type":"video","frames":[1,2,3]}'
    )


def test_tool_calls_and_tool_result(o200k: TokenCounter) -> None:
    args = '{"command": "ls -la"}'
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": args}}
        ],
    }
    assert o200k.count_message(call) == msg_cost(o200k, "assistant", "run", args)
    result = {"role": "tool", "tool_call_id": "call_1", "content": "total 0"}
    assert o200k.count_message(result) == msg_cost(o200k, "tool", "call_1", "total 0")


def test_tool_call_arguments_not_a_string(o200k: TokenCounter) -> None:
    call = {
        "role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": "run", "arguments": {"a": 1}}}],
    }
    assert o200k.count_message(call) == msg_cost(o200k, "assistant", "run", '{"a":1}')


@pytest.mark.parametrize("field", ["refusal", "reasoning_content", "reasoning"])
def test_assistant_text_fields(o200k: TokenCounter, field: str) -> None:
    text = "I thought about it at length."
    message = {"role": "assistant", "content": "ok", field: text}
    assert o200k.count_message(message) == msg_cost(o200k, "assistant", "ok", text)


def test_exact_counts_differ_from_estimate(o200k: TokenCounter) -> None:
    estimate = TokenCounter("estimate", None)
    text = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    assert estimate.count_text(text) == math.ceil(len(text.encode()) / 4) == estimate_tokens(text)
    assert not estimate.exact and o200k.exact


class Weird:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


JUNK: list[Any] = [
    None,
    42,
    "just a string",
    ["a", "list"],
    {"role": 5, "content": 3.5},
    {"content": {"nested": [{"deep": None}]}},
    {"role": "user", "content": [None, 1, "loose string", {"type": "text", "text": 7}, {}]},
    {"role": "user", "content": [{"type": "image_url"}, {"no": "type"}]},
    {"role": "assistant", "tool_calls": "not a list"},
    {"role": "assistant", "tool_calls": [None, 3, {"function": "x"}, {"function": {"name": 1}}]},
    {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
    {1: "non-str key", "role": "user"},
    {"role": "user", "content": 2**100},
    {"role": "user", "content": 10**5000},
    {"role": "user", "content": {1, 2}},
    {"role": "user", "content": Weird()},
    {"role": "user", "content": b"bytes"},
    {"role": "user", "content": "x", "name": ["not", "a", "string"]},
]


@pytest.mark.parametrize("message", JUNK, ids=range(len(JUNK)))
def test_junk_never_raises(o200k: TokenCounter, message: Any) -> None:
    n = o200k.count_message(message)
    assert isinstance(n, int) and n >= TOKENS_PER_MESSAGE
    assert o200k.count_message(message) == n  # and counts the same twice (cached or not)


def test_junk_conversation_and_cycles(o200k: TokenCounter) -> None:
    cyclic: dict[str, Any] = {"role": "user"}
    cyclic["content"] = cyclic
    assert o200k.count_messages([*JUNK, cyclic]) > 0
    assert o200k.count_messages(None) == REPLY_PRIMING  # type: ignore[arg-type]
    assert o200k.count_messages("junk") > REPLY_PRIMING  # type: ignore[arg-type]
    assert TokenCounter("estimate", None).count_messages([*JUNK, cyclic]) > 0


def test_count_tools(o200k: TokenCounter) -> None:
    assert o200k.count_tools(None) == 0
    assert o200k.count_tools([]) == 0
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    expected = enc_len(
        o200k, '[{"type":"function","function":{"name":"run","parameters":{"type":"object"}}}]'
    )
    assert o200k.count_tools(tools) == expected
    assert o200k.count_tools(tools) == expected


# --- the cache


def conversation(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i}: " + "why? " * i})
        messages.append({"role": "assistant", "content": f"answer {i}"})
    return messages


def test_second_count_is_all_hits(fresh: TokenCounter) -> None:
    messages = conversation(10)
    first = fresh.count_messages(messages)
    assert fresh.cache_info() == (0, 21, 21)
    assert fresh.count_messages(messages) == first
    assert fresh.cache_info() == (21, 21, 21)


def test_next_turn_counts_only_new_messages(fresh: TokenCounter) -> None:
    messages = conversation(10)
    fresh.count_messages(messages)
    turn = [*messages, {"role": "user", "content": "one more"}]
    assert fresh.count_messages(turn) == fresh.count_messages(messages) + fresh.count_message(
        turn[-1]
    )
    hits, misses, size = fresh.cache_info()
    assert (misses, size) == (22, 22)


def test_cache_key_ignores_key_order(fresh: TokenCounter) -> None:
    fresh.count_message({"role": "user", "content": "hi"})
    fresh.count_message({"content": "hi", "role": "user"})
    assert fresh.cache_info() == (1, 1, 1)


def test_cache_key_ignores_key_order_when_nested(fresh: TokenCounter) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    fresh.count_message({"role": "assistant", "content": None, "tool_calls": [call]})
    rebuilt = {"function": {"arguments": "{}", "name": "run"}, "type": "function", "id": "c1"}
    fresh.count_message({"tool_calls": [rebuilt], "role": "assistant", "content": None})
    assert fresh.cache_info() == (1, 1, 1)


# Values Python's hash() cannot tell apart (hash(-1) == hash(-2) == -2; ints are reduced modulo
# 2**61 - 1; 1 == 1.0 == True), which cache keys built on it shared (issue 20).
HASHED_ALIKE = [(1, 2**61), (-1, -2), (1, 1.0), (1, True), (0, 0.0), (5, 5 + 2**61 - 1)]


@pytest.mark.parametrize(("a", "b"), HASHED_ALIKE)
def test_values_python_hashes_alike_get_their_own_counts(
    fresh: TokenCounter, a: Any, b: Any
) -> None:
    assert hash(a) == hash(b)
    first, second = ({"role": "user", "content": v} for v in (a, b))
    assert fresh.message_key(first) != fresh.message_key(second)
    alone = TokenCounter(fresh.name, fresh.encoding, cache_size=0)
    fresh.count_message(first)
    assert fresh.count_message(second) == alone.count_message(second)
    assert fresh.cache_info().size == 2
    for kind in (lambda v: [v], lambda v: {"x": v}):  # nested: keyed by JSON before, too
        assert fresh.message_key({"content": kind(a)}) != fresh.message_key({"content": kind(b)})


def test_cache_keys_are_digests_of_the_content(fresh: TokenCounter) -> None:
    text = "x" * 5000
    assert fresh.text_key(text) == fresh.text_key("".join(["x"] * 5000))  # by content
    assert fresh.text_key(text) != fresh.text_key(text[:-1] + "y")
    assert fresh.text_key(text, "tools") != fresh.text_key(text)  # namespaces
    for key in (fresh.text_key(text), fresh.message_key({"role": "user"})):
        assert isinstance(key, bytes) and len(key) == 16
    lone = "\ud800" + "a" * 2000  # a lone surrogate: keyed, not refused
    assert fresh.text_key(lone) != fresh.text_key("\ud801" + "a" * 2000)


def test_cache_is_bounded_lru(o200k: TokenCounter) -> None:
    small = TokenCounter(o200k.name, o200k.encoding, cache_size=2)
    a, b, c = ({"role": "user", "content": x} for x in "abc")
    small.count_message(a)
    small.count_message(b)
    small.count_message(a)  # a is now the most recent
    small.count_message(c)  # evicts b
    assert small.cache_info() == (1, 3, 2)
    small.count_message(a)
    assert small.cache_info().hits == 2
    small.count_message(b)
    assert small.cache_info().misses == 4


def test_cache_size_zero_disables_cache(o200k: TokenCounter) -> None:
    off = TokenCounter(o200k.name, o200k.encoding, cache_size=0)
    messages = conversation(3)
    assert off.count_messages(messages) == off.count_messages(messages)
    assert off.cache_info() == (0, 14, 0)


def test_threads_agree(fresh: TokenCounter) -> None:
    messages = conversation(30)
    expected = TokenCounter(fresh.name, fresh.encoding, cache_size=0).count_messages(messages)
    results: list[int] = []

    def work() -> None:
        for _ in range(20):
            results.append(fresh.count_messages(messages))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == {expected}


# --- byte bound


def test_upper_bound_holds_on_awkward_text(o200k: TokenCounter, tokenizers: Tokenizers) -> None:
    cl100k = tokenizers.for_model("qwen")
    for text in ["", "a", "ü" * 50, "数字" * 40, "🙂" * 30, "\x00\x01\x02", "<|endoftext|>" * 3]:
        n_bytes = len(text.encode())
        assert enc_len(o200k, text) <= upper_bound_bytes(n_bytes)
        assert enc_len(cl100k, text) <= upper_bound_bytes(n_bytes)


@pytest.mark.parametrize(
    ("text", "max_tokens", "fits"),
    [
        ("", 0, True),
        ("abcd", 4, True),
        ("abcd", 3, False),  # "don't know": go and count
        ("ü" * 10, 20, True),  # 20 bytes
        ("ü" * 10, 19, False),
        ("x", -1, False),
    ],
)
def test_fits_by_bytes(text: str, max_tokens: int, fits: bool) -> None:
    assert fits_by_bytes(text, max_tokens) is fits


# --- fallback without the encoding file


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard only: any attempt to fetch an encoding blob fails the test loudly."""

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("tried to download an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", refuse)


@pytest.mark.usefixtures("no_network")
def test_missing_file_falls_back_to_estimate_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.tokenizers")
    started = time.monotonic()
    tk = Tokenizers(cache_dir=str(tmp_path))
    counter = tk.for_model("gpt-4o")
    assert time.monotonic() - started < 2
    assert (counter.name, counter.exact) == ("estimate", False)
    assert counter.note and "TIKTOKEN_CACHE_DIR" in counter.note
    assert counter.count_text("abcdefgh") == 2
    assert counter.count_messages([{"role": "user", "content": "abcd"}]) == 3 + 1 + 1 + 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "TIKTOKEN_CACHE_DIR" in warnings[0].getMessage()
    assert "o200k_base" in warnings[0].getMessage()

    caplog.clear()
    assert tk.for_model("gpt-4o-mini") is counter
    assert not caplog.records
    # another encoding warns once for itself, and shares the estimate counter
    assert tk.for_model("qwen3") is counter
    assert len(caplog.records) == 1 and "cl100k_base" in caplog.records[0].getMessage()
    assert os.listdir(tmp_path) == []


@pytest.mark.usefixtures("no_network")
def test_corrupt_file_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790").write_bytes(b"garbage")
    counter = Tokenizers(cache_dir=str(tmp_path)).for_model("gpt-4o")
    assert not counter.exact


@pytest.mark.usefixtures("no_network")
def test_caching_disabled_and_unknown_encoding_fall_back(tmp_path: Path) -> None:
    assert not Tokenizers(cache_dir="").for_model("gpt-4o").exact
    assert not Tokenizers(override="p50k_base", cache_dir=str(tmp_path)).for_model("x").exact


def test_allow_download_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hang(url: str) -> bytes:
        release.wait(5)
        raise OSError("offline")

    monkeypatch.setattr(tiktoken.load, "read_file", hang)
    started = time.monotonic()
    counter = Tokenizers(cache_dir=str(tmp_path), allow_download=True, load_timeout=0.2).for_model(
        "gpt-4o"
    )
    release.set()
    assert time.monotonic() - started < 2
    assert not counter.exact


def test_allow_download_writes_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    blob = Path(CACHE_DIR, key).read_bytes()
    fetched: list[str] = []

    def fake_download(url: str) -> bytes:
        fetched.append(url)
        return blob

    monkeypatch.setattr(tiktoken.load, "read_file", fake_download)
    counter = Tokenizers(cache_dir=str(tmp_path), allow_download=True).for_model("qwen3")
    assert counter.exact and counter.count_text("hello world") == 2
    assert fetched == [loading._SPECS["cl100k_base"].url]
    assert (tmp_path / key).read_bytes() == blob


def test_resolve_cache_dir_mirrors_tiktoken() -> None:
    assert resolve_cache_dir({"TIKTOKEN_CACHE_DIR": "/a", "DATA_GYM_CACHE_DIR": "/b"}) == "/a"
    assert resolve_cache_dir({"DATA_GYM_CACHE_DIR": "/b"}) == "/b"
    assert resolve_cache_dir({}).endswith("data-gym-cache")


# --- one count under way, shared


class Gated:
    """The real encoding behind a gate, so a test can have two threads ask for one count at
    once; the first call may be made to fail."""

    def __init__(self, encoding: Any, fail_first: bool = False) -> None:
        self.encoding = encoding
        self.fail_first = fail_first
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(5)
        if self.fail_first and self.calls == 1:
            raise RuntimeError("encoder failed")
        return list(self.encoding.encode_ordinary(text))


def _two_callers(counter: TokenCounter, gated: Gated, text: str) -> tuple[list[Any], int]:
    """Two threads count `text`, the second while the first is inside the encoder: what each
    got (a count or the exception) and how many encodes had begun when the second waited."""
    results: list[Any] = []

    def count() -> None:
        try:
            results.append(counter.count_text(text))
        except RuntimeError as exc:
            results.append(exc)

    first = threading.Thread(target=count)
    first.start()
    assert gated.entered.wait(5)
    second = threading.Thread(target=count)
    second.start()
    second.join(0.1)  # time enough to reach the encoder, had it not waited
    calls_meanwhile = gated.calls
    gated.gate.set()
    first.join(5)
    second.join(5)
    return results, calls_meanwhile


def test_a_count_under_way_is_waited_for_not_repeated(o200k: TokenCounter) -> None:
    gated = Gated(o200k.encoding)
    counter = TokenCounter(o200k.name, gated)  # type: ignore[arg-type]
    text = "collecting package metadata ... done\n" * 100
    results, meanwhile = _two_callers(counter, gated, text)
    assert meanwhile == 1 and gated.calls == 1
    assert results == [enc_len(o200k, text)] * 2
    assert counter.count_text(text) == enc_len(o200k, text) and gated.calls == 1  # cached


def test_a_failed_count_is_computed_again_by_its_waiter(o200k: TokenCounter) -> None:
    gated = Gated(o200k.encoding, fail_first=True)
    counter = TokenCounter(o200k.name, gated)  # type: ignore[arg-type]
    text = "resolving dependencies\n" * 100
    results, meanwhile = _two_callers(counter, gated, text)
    assert meanwhile == 1 and gated.calls == 2
    assert isinstance(results[0], RuntimeError) and results[1] == enc_len(o200k, text)
    assert not counter._flights  # nothing left under way


def test_uncounted_lists_texts_neither_cached_nor_under_way(fresh: TokenCounter) -> None:
    short, cached, new = "x" * 10, "cached line\n" * 100, "new line\n" * 200
    fresh.count_text(cached)
    assert fresh.uncounted([short, cached, new]) == [new]  # short texts are never cached


# --- long texts, counted in pieces (proxy.pieces) -------------------------------------------------


def corpus_texts() -> list[str]:
    texts = []
    for path in sorted(CORPUS.glob("*.json")):
        for m in json.loads(path.read_text())["messages"]:
            if isinstance(m.get("content"), str):
                texts.append(m["content"])
            for call in m.get("tool_calls") or []:
                texts.append(call["function"]["arguments"])
    return texts


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_both_encodings_count_long_texts_in_pieces(tokenizers: Tokenizers, name: str) -> None:
    counter = tokenizers.for_encoding(name)
    assert counter.encoding is not None and counter.encoding._pat_str in pieces.PATTERNS
    assert counter._pieces


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no corpus")
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_no_cut_changes_the_tokens_of_a_corpus_text(tokenizers: Tokenizers, name: str) -> None:
    encoding = tokenizers.for_encoding(name).encoding
    assert encoding is not None
    cuts = 0
    for text in corpus_texts():
        whole = encoding.encode_ordinary(text)
        for size in (8, 1000):
            parts = list(pieces.pieces(text, size))
            assert "".join(parts) == text
            assert [t for p in parts for t in encoding.encode_ordinary(p)] == whole
            cuts += len(parts) - 1
    assert cuts > 100_000


# What the encodings' patterns treat specially: newlines and other whitespace, the apostrophe of
# contractions, o200k's `/` after newlines, marks, digits in threes, letters of several scripts
# and cases, combining marks, CJK marks, emoji (with skin tone and joiner), a lone surrogate.
PIECES = [
    *"aZxQsStTdD09 '\"/.,:;-_()[]{}<>!?@#$%^&*+=|\\`~\n\r\t",
    *["\n\n", "  ", "\r\n", "ll", "re", "'s", "'T", "23", "4567", "é", "É", "×", "÷", "ª"],
    *["\u0301", "\u0308", "中", "字", "，", "。", "、", "！", "ア", "あ", "한", "Ж", "ж", "Ω"],
    *["ς", "\xa0", "\u3000", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "😀", "👍🏽", "\u200d"],
    "\ud800",
]


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_no_cut_changes_the_tokens_of_any_text(text: str) -> None:
    """Every cut at once (pieces of one character and on): their tokens are the whole's."""
    for encoding in (tiktoken.get_encoding("cl100k_base"), tiktoken.get_encoding("o200k_base")):
        parts = list(pieces.pieces(text, 1))
        assert "".join(parts) == text
        assert [t for p in parts for t in encoding.encode_ordinary(p)] == (
            encoding.encode_ordinary(text)
        )


def test_a_long_text_is_counted_exactly_without_the_list_of_its_tokens(o200k: TokenCounter) -> None:
    """Issue 20: encode_ordinary's list costs ~36 bytes a token; a 54 MB body peaked at 1.8 GB."""
    line = "Collecting requests==2.31.0\n  Downloading requests-2.31.0-py3-none-any.whl (62 kB)\n"
    text = line * 40_000  # 3.4 MB, ~1M tokens: ~36 MB as a list
    counter = TokenCounter(o200k.name, o200k.encoding, cache_size=0)
    tracemalloc.start()
    try:
        n = counter.count_text(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == enc_len(o200k, text)
    assert peak < 4_000_000


def test_the_estimate_counts_bytes_without_a_copy_of_the_text() -> None:
    text = "数字和文字" * 800_000  # 4M characters, 12 MB of UTF-8
    estimate = TokenCounter("estimate", None, cache_size=0)
    tracemalloc.start()
    try:
        n = estimate.count_text(text)
        fits = fits_by_bytes(text, 11_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 3_000_000 and fits is False
    assert peak < 3_000_000
    for sample in ("abc", "é" * 5, "\ud800x", "😀" * 3, ""):
        assert pieces.utf8_length(sample) == len(sample.encode("utf-8", "surrogatepass"))


def test_a_huge_word_is_counted_in_bounded_pieces(o200k: TokenCounter) -> None:
    """One 1 MB run of letters has no place a token must end: whole, tiktoken's merges take
    quadratic time (seconds); in pieces of at most two SIZEs the count is a token or so off per
    piece, and no encode sees more."""
    text = "ab" * 500_000
    seen: list[int] = []
    encoding = o200k.encoding
    assert encoding is not None

    class Recording:
        def encode_ordinary(self, piece: str) -> list[int]:
            seen.append(len(piece))
            return encoding.encode_ordinary(piece)

    counter = TokenCounter(o200k.name, Recording())  # type: ignore[arg-type]
    counter._pieces = True
    n = counter.count_text(text)
    assert max(seen) <= 2 * pieces.SIZE
    exact = sum(
        len(encoding.encode_ordinary(text[i : i + 4096])) for i in range(0, len(text), 4096)
    )
    assert abs(n - exact) <= len(text) // 4096 + len(seen)
