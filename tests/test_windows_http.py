"""Served windows over real HTTP: discovery, shrink-and-retry on overflow, silent truncation.

Each backend flavour is a fake (tests/fakes/backends.py) with its real discovery endpoint and its
exact overflow error body; the proxy runs under uvicorn in front of it.
"""

from __future__ import annotations

import httpx
import openai

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.backends import FakeBackend
from tests.fakes.server import serve

WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly hex bold judges "
    "near old river banks"
).split()


def convo(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful agent."}]
    for t in range(turns):
        msgs.append(
            {
                "role": "user",
                "content": f"question {t} "
                + " ".join(WORDS[(t * 7 + i) % len(WORDS)] for i in range(120)),
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": f"answer {t} "
                + " ".join(WORDS[(t * 3 + i * 5) % len(WORDS)] for i in range(120)),
            }
        )
    msgs.append({"role": "user", "content": "final question?"})
    return msgs


def run(fake: FakeBackend, stream: bool = False, headers=None, **kw):
    with serve(fake.app()) as up:
        settings = Settings(upstream_url=up + fake.prefix, **kw)
        with serve(create_app(settings)) as px:
            body = {"model": fake.model, "messages": convo(40), "max_tokens": 256}
            if stream:
                body["stream"] = True
            r = httpx.post(
                px + "/v1/chat/completions", json=body, timeout=30, headers=headers or {}
            )
            return r, fake


def test_discovered_window_prevents_overflow():
    r, fake = run(FakeBackend("llamacpp", window=3000))
    assert r.status_code == 200
    assert fake.hits["/props"] == 1
    assert int(r.headers["x-shrink-budget"]) < 3000


def test_overflow_retry_non_stream():
    r, fake = run(FakeBackend("llamacpp", window=3000), discover_window=False)
    assert r.status_code == 200
    assert r.headers["x-shrink-retried"] == "overflow"
    assert fake.hits["/v1/chat/completions"] == 2
    # The retry was planned for the limit the error stated, and says so.
    assert int(r.headers["x-shrink-budget"]) < 3000
    assert "trim:" in r.headers["x-shrink-actions"]
    # The retry is rebuilt from the client's request: every field it sent is still there.
    first, retried = fake.chat_bodies
    assert retried["max_tokens"] == first["max_tokens"] == 256
    assert retried["model"] == first["model"] and "stream" not in retried
    assert len(retried["messages"]) < len(first["messages"])


def test_overflow_retry_stream():
    for flavour in ("vllm", "omlx", "lmstudio", "openai", "openrouter"):
        r, fake = run(FakeBackend(flavour, window=3000), stream=True, discover_window=False)
        assert r.status_code == 200, flavour
        assert r.headers["x-shrink-retried"] == "overflow"
        # The retried stream still asks for the usage chunk the proxy injected the first time.
        first, retried = fake.chat_bodies
        for sent in (first, retried):
            assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
        assert retried["max_tokens"] == 256


def test_unfixable_overflow_is_relayed_verbatim():
    r, fake = run(
        FakeBackend("vllm", window=600),
        discover_window=False,
        headers={"x-fake-prompt-tokens": "5000"},
    )
    assert r.status_code == 400
    assert "maximum context length is 600" in r.text
    assert fake.hits["/v1/chat/completions"] == 2
    assert r.headers["x-shrink-retried"] == "overflow"


def test_ollama_silent_truncation_warns():
    fake = FakeBackend("ollama", window=1024, loaded=False)
    r, fake = run(fake, discover_window=False)
    assert r.headers.get("x-shrink-warning") == "upstream-truncated"
    fake2 = FakeBackend("ollama", window=2048)
    r, fake2 = run(fake2)
    assert "x-shrink-warning" not in r.headers


def test_a_configured_model_window_always_wins_over_discovery():
    r, fake = run(FakeBackend("llamacpp", window=3000), model_windows={"test-model": 2048})
    assert r.status_code == 200
    assert fake.hits["/props"] == 0  # not even asked
    assert int(r.headers["x-shrink-budget"]) < 2048


def test_the_preview_plans_for_the_served_window_calibrated_like_the_real_route():
    """`/v1/shrink` plans a body exactly as `/v1/chat/completions` does: for the window the
    backend serves (not SHRINK_CONTEXT_WINDOW), scaled by what calibration has learnt."""
    fake = FakeBackend("llamacpp", window=4096)
    body = {"model": fake.model, "messages": convo(40), "max_tokens": 64}
    with serve(fake.app()) as up, serve(create_app(Settings(upstream_url=up + "/v1"))) as px:
        client = openai.OpenAI(base_url=px + "/v1", api_key="x", max_retries=0)

        def preview_then_send(answers: int) -> dict:
            r = httpx.post(px + "/v1/shrink", json=body, timeout=30)
            assert r.status_code == 200, r.text
            report = r.json()["report"]
            # The backend counts 1.1x our tokens: three answers teach calibration so.
            counted = {"x-fake-prompt-tokens": str(report["tokens_after"] * 11 // 10)}
            for _ in range(answers):
                raw = client.chat.completions.with_raw_response.create(
                    **body, extra_headers=counted
                )
                assert raw.http_response.status_code == 200
                for name in ("x-shrink-budget", "x-shrink-tokens-after", "x-shrink-actions"):
                    assert raw.headers[name] == r.headers[name], name
                assert fake.chat_bodies[-1]["messages"] == r.json()["messages"]
            return report

        assert preview_then_send(3)["window"] == 4096  # discovered from /props, not 32,768
        # 1.1 applied rounded up to a sixteenth (proxy.overflow.Calibration): 4096 / 1.125
        assert preview_then_send(1)["window"] == int(4096 / 1.125)
        client.close()


def test_a_refused_request_quotes_the_served_window_not_the_calibrated_one():
    """With SHRINK_CUT_LATEST_USER=false a latest user message too large alone is refused; the
    400 quotes the window the backend serves (4,096), not the smaller one calibration planned
    with in our units, and says by how much the backend's counts differ."""
    fake = FakeBackend("llamacpp", window=4096)
    with serve(fake.app()) as up:
        settings = Settings(upstream_url=up + "/v1", cut_latest_user=False)
        with serve(create_app(settings)) as px:
            small = {"model": fake.model, "messages": convo(6), "max_tokens": 64}
            for _ in range(3):  # the backend counts 1.4x our tokens: calibration learns it
                ours = httpx.post(px + "/v1/shrink", json=small).json()["report"]["tokens_after"]
                r = httpx.post(
                    px + "/v1/chat/completions",
                    json=small,
                    headers={"x-fake-prompt-tokens": str(ours * 14 // 10)},
                )
                assert r.status_code == 200, r.text
            huge = {"role": "user", "content": " ".join(WORDS * 400)}
            r = httpx.post(
                px + "/v1/chat/completions",
                json={"model": fake.model, "messages": [huge], "max_tokens": 64},
            )
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    budget = int(r.headers["x-shrink-budget"])
    assert budget < 4096 / 1.4
    assert f"a prompt budget of {budget:,} tokens (its window of 4,096 minus" in message
    # 1.4 as calibration applies it, rounded up to a sixteenth: 1.4375
    assert "the backend counts about 1.44x as many" in message
    assert fake.hits["/v1/chat/completions"] == 3  # the refused one never went upstream
