"""Fuzzing the whole proxy over HTTP: odd but legal, and illegal, chat requests.

Every input either reaches the upstream (valid JSON, every leading system message and the latest
user message verbatim, every other top-level field unchanged) or gets a clear OpenAI-shaped 4xx.
Never a 5xx, never a traceback, never a request that reaches the upstream in a broken shape.
One proxy serves the whole module (it is stateless between requests), in front of the
session's fake upstream; windows of 512 and 2048 tokens are in play through the model name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy import wire
from proxy.app import create_app
from proxy.retrieval.tool import CHAT_TOOL
from proxy.settings import Settings
from tests.fakes.server import serve
from tests.fakes.upstream import FakeUpstream

PINNED = ("system", "developer")
MODELS = ["tiny-model", "small-model", "gpt-4o", "qwen2.5-coder:7b", "unknown"]


@pytest.fixture(scope="module")
def fuzz_proxy(fake: FakeUpstream) -> Iterator[tuple[httpx.Client, FakeUpstream]]:
    settings = Settings(
        upstream_url=fake.url + "/v1",  # type: ignore[attr-defined]
        model_windows={"tiny": 512, "small": 2048},
        completion_reserve=256,
        min_prompt_budget=128,
        tool_max_tokens=256,
        discover_window=False,
    )
    with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, fake


# --- strategies ------------------------------------------------------------------------------

text = st.text(max_size=60)
big_text = st.builds(
    lambda line, n: (line + "\n") * n, st.text(min_size=1, max_size=50), st.integers(1, 4000)
)
# Tool output that is JSON nested thousands of levels deep must be compacted as text, not fail.
NESTED_TEXT_MAX = 5000
nested_json_text = st.integers(1, NESTED_TEXT_MAX).map(lambda d: '{"a":' * d + "1" + "}" * d)


def nest(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


nested_value = st.integers(1, 300).map(nest)  # past wire.MAX_DEPTH on purpose, sometimes
scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), text)

part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(text, big_text)}),
    st.fixed_dictionaries(
        {
            "type": st.just("image_url"),
            "image_url": st.fixed_dictionaries(
                {"url": st.just("data:image/png;base64,iVBORw0KGgo="), "detail": text}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("input_audio"),
            "input_audio": st.fixed_dictionaries(
                {"data": st.just("UklGRiQAAABXQVZF"), "format": st.sampled_from(["wav", "mp3"])}
            ),
        }
    ),
    st.fixed_dictionaries({"type": text}),  # an unknown part type, no payload
    st.fixed_dictionaries({"type": st.just("text"), "text": scalar}),  # text that is not text
    scalar,
)
content = st.one_of(
    st.none(),
    text,
    big_text,
    nested_json_text,
    st.lists(part, max_size=4),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    nested_value,
    st.dictionaries(text, text, max_size=3),
)
role = st.one_of(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]), text
)
tool_call = st.fixed_dictionaries(
    {
        "id": st.one_of(st.sampled_from(["call_1", "call_2"]), scalar),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": st.one_of(text, st.integers()),
                # Arguments should be a JSON string; clients send objects, numbers and worse.
                "arguments": st.one_of(
                    text, st.dictionaries(text, scalar, max_size=3), scalar, nested_value
                ),
            }
        ),
    }
)
message = st.fixed_dictionaries(
    {"role": role, "content": content},
    optional={
        "tool_calls": st.one_of(st.lists(tool_call, max_size=3), scalar),
        "tool_call_id": st.one_of(st.sampled_from(["call_1", "call_2", "call_9"]), scalar),
        "name": st.one_of(text, st.integers()),
        "k" * 10_000: scalar,  # a very long key
    },
)
plain_user = st.builds(lambda t: {"role": "user", "content": t}, st.one_of(text, big_text))
system = st.builds(lambda t: {"role": "system", "content": t}, text)
messages = st.builds(
    lambda head, body, tail: head + body + tail,
    st.lists(system, max_size=2),
    st.lists(message, max_size=8),
    st.lists(plain_user, max_size=1),
)
tool_def = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": text, "parameters": st.one_of(st.dictionaries(text, scalar), scalar)}
            ),
        }
    ),
    scalar,
)


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`common` about four times in five: most inputs should get past the parser."""
    return st.sampled_from([True, True, True, True, False]).flatmap(
        lambda usual: common if usual else rare
    )


body = st.fixed_dictionaries(
    {"messages": mostly(messages, st.one_of(st.just([]), scalar))},
    optional={
        "model": mostly(st.sampled_from(MODELS), scalar),
        "stream": st.one_of(st.booleans(), st.just("yes")),
        "max_tokens": st.one_of(st.integers(-5, 10**12), st.just("many")),
        "tools": st.one_of(st.lists(tool_def, max_size=3), scalar),
        "temperature": mostly(st.floats(0, 2), st.floats()),  # NaN, inf: not JSON, so a 400
        "x_vendor": st.dictionaries(text, scalar, max_size=3),
    },
)
# Byte-level damage applied after encoding.
MUTATIONS = ["lone_surrogate", "bad_utf8", "truncated", "not_object"]
mutation = mostly(st.just("none"), st.sampled_from(MUTATIONS))


def encode(value: dict[str, Any], mutation: str) -> bytes:
    raw = json.dumps(value).encode()  # NaN becomes the non-JSON token NaN
    if mutation == "lone_surrogate":
        return raw[:-1] + b', "x_s": "\\ud800"}'
    if mutation == "bad_utf8":
        return raw.replace(b'"messages"', b'"mess\xff\xfeages"', 1)
    if mutation == "truncated":
        return raw[: len(raw) // 2]
    if mutation == "not_object":
        return b"[" + raw + b"]"
    return raw


# --- the oracle --------------------------------------------------------------------------------


def depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values() if isinstance(x, dict | list))
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v if isinstance(x, dict | list))
    return deepest


def is_chat_request(parsed: Any) -> bool:
    """The documented contract: what the proxy must accept (and what it must refuse)."""
    if not isinstance(parsed, dict):
        return False
    msgs = parsed.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return False
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs):
        return False
    model = parsed.get("model")
    return (model is None or isinstance(model, str)) and depth(msgs) <= wire.MAX_DEPTH


def assert_openai_error(r: httpx.Response) -> dict[str, Any]:
    assert r.headers["content-type"].startswith("application/json"), r.text[:300]
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text
    return err  # type: ignore[no-any-return]


def check_forwarded(
    raw: bytes, parsed: dict[str, Any], sent: bytes, mode: str, actions: str
) -> None:
    forwarded = orjson.loads(sent)  # the upstream got valid JSON
    if mode == "off" and parsed.get("stream") is not True:
        assert sent == raw
    msgs: list[dict[str, Any]] = parsed["messages"]
    out: list[Any] = forwarded["messages"]
    pinned = 0
    while pinned < len(msgs) and msgs[pinned]["role"] in PINNED:
        pinned += 1
    assert out[:pinned] == msgs[:pinned], "a leading system message changed"
    users = [m for m in msgs if m["role"] == "user"]
    if users and "user_cut" not in actions:
        assert users[-1] in out, "the latest user message was dropped or changed"
    elif users:  # too large alone: its middle was cut, with the marker
        cut = [m for m in out if m.get("role") == "user"][-1]
        assert "omitted by shrink-proxy" in str(cut["content"]), "a user message cut unmarked"
    rest = {k: v for k, v in forwarded.items() if k not in ("messages", "stream_options")}
    want = {k: v for k, v in parsed.items() if k not in ("messages", "stream_options")}
    if rest.get("tools") != want.get("tools"):
        # The one addition: the retrieval tool after the client's own, when a marker names a ref.
        assert rest["tools"] == [*want["tools"], CHAT_TOOL] and "hash=" in str(out)
        rest["tools"] = want["tools"]
    assert rest == want, "a top-level field was dropped or changed"


# Falsifying examples with 100 kB texts make a large repr; that is expected here.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    value=body,
    mutation=mutation,
    mode=st.sampled_from(["auto", "tools", "trim", "off", "compact"]),
)
def test_any_body_is_forwarded_intact_or_refused_cleanly(fuzz_proxy, value, mutation, mode):
    client, fake = fuzz_proxy
    fake.reset()
    raw = encode(value, mutation)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    r = client.post(
        "/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "x-shrink-mode": mode},
    )
    assert r.status_code < 500, r.text[:500]
    event(f"status {r.status_code}")
    # Forwarded requests carry an x-request-id; summary calls (compact mode asks the upstream
    # for one, and a late one may land during a later example) carry none.
    chats = [
        q
        for q in fake.requests
        if q.method == "POST"
        and q.path == "/v1/chat/completions"
        and q.header("x-request-id") is not None
    ]
    if r.status_code == 200:
        assert is_chat_request(parsed), "the proxy forwarded something that is not a chat request"
        assert len(chats) == 1
        check_forwarded(raw, parsed, chats[-1].body, mode, r.headers["x-shrink-actions"])
        assert int(r.headers["x-shrink-tokens-after"]) >= 0
        return
    err = assert_openai_error(r)
    assert 400 <= r.status_code < 500
    assert chats == [], "an error was answered but the request still went upstream"
    if is_chat_request(parsed) and r.status_code == 400:
        # A valid request may only be refused for not fitting the model's window.
        assert err["code"] == "context_length_exceeded", err


def test_system_prompt_is_never_cut(fuzz_proxy):
    """A system prompt that alone outgrows the budget: refuse (400), never cut it silently."""
    client, fake = fuzz_proxy
    fake.reset()
    prompt = " ".join(f"rule{i}: always do thing {i}." for i in range(600))  # ~5,400 tokens
    sent = {
        "model": "small-model",  # window 2048
        "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}],
    }
    r = client.post("/v1/chat/completions", json=sent)
    if r.status_code == 200:
        assert fake.requests[-1].json()["messages"] == sent["messages"]
    else:
        assert r.status_code == 400
        assert assert_openai_error(r)["code"] == "context_length_exceeded"


@pytest.mark.parametrize("text", ['{"a":' * 1000 + "1" + "}" * 1000, "[" * 3000 + "]" * 3000])
def test_deeply_nested_tool_output_is_not_a_500(fuzz_proxy, text):
    """Tool output is text: JSON inside it may be nested arbitrarily deep (5 kB here)."""
    client, _ = fuzz_proxy
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": text},
        {"role": "user", "content": "and?"},
    ]
    r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": msgs})
    assert r.status_code == 200, r.text[:300]


def test_huge_single_messages(fuzz_proxy):
    """A 2 MB user message alone cannot fit: its middle is cut, marked, and the client told.
    A 2 MB tool result is compacted, and the latest user message still arrives verbatim."""
    client, fake = fuzz_proxy
    fake.reset()
    huge = "".join(f"line {i}: value {i * 7919 % 10007}\n" for i in range(90_000))  # ~2 MB
    r = client.post(
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": huge}]},
    )
    assert r.status_code == 200, r.text[:300]
    # (The shared fake's usage may have the proxy warn of a truncation too, after other cases.)
    assert "latest-user-cut" in r.headers["x-shrink-warning"].split(", ")
    (sent,) = fake.requests[-1].json()["messages"]
    assert sent["content"].startswith("line 0: value 0\n") and sent["content"].endswith(huge[-99:])
    assert "lines" in sent["content"] and "omitted by shrink-proxy" in sent["content"]
    fake.reset()
    call = {"id": "c", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": huge},
        {"role": "user", "content": "what is on line 4242?"},
    ]
    r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": msgs})
    assert r.status_code == 200, r.text[:300]
    sent = fake.requests[-1].json()["messages"]
    assert sent[:2] == msgs[:2] and sent[-1] == msgs[-1]
    assert len(fake.requests[-1].body) < len(huge) // 10


def test_nan_and_lone_surrogate_examples_are_refused(fuzz_proxy):
    """Explicit cases the random search may take a while to hit."""
    client, fake = fuzz_proxy
    fake.reset()
    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for raw in (
        encode({**good, "temperature": math.nan}, "none"),
        encode(good, "lone_surrogate"),
        encode(good, "bad_utf8"),
        b'{"model": "m", "messages": [{"role": "user", "content": "\\udc00 lone low"}]}',
    ):
        r = client.post("/v1/chat/completions", content=raw)
        assert r.status_code == 400, (raw, r.text)
        assert_openai_error(r)
    assert fake.requests == []


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b'{"messages": [{"role": "user", "content": ' + b"[" * 2000 + b"]" * 2000 + b"}]}",
    ],
    ids=["arrays_100k", "objects_5k", "content_2k"],
)
def test_absurd_nesting_is_a_400(fuzz_proxy, raw):
    client, fake = fuzz_proxy
    fake.reset()
    r = client.post("/v1/chat/completions", content=raw)
    assert r.status_code == 400
    assert_openai_error(r)
    assert fake.requests == []


@pytest.mark.parametrize(
    ("ctype", "status"),
    [
        ("multipart/form-data; boundary=x", 415),
        ("application/x-www-form-urlencoded", 415),
        ("text/plain", 200),  # curl's -d without -H: the body is JSON, so it is served
        ("application/json; charset=utf-8", 200),
        (None, 200),
    ],
)
def test_content_types(fuzz_proxy, ctype, status):
    client, fake = fuzz_proxy
    fake.reset()
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    headers = {"content-type": ctype} if ctype else {}
    r = client.post("/v1/chat/completions", content=raw, headers=headers)
    assert r.status_code == status, r.text
    if status != 200:
        assert_openai_error(r)
