"""`shrink-proxy stats` against a real server: the summary, the key, and the failures."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator

import pytest

from proxy.metrics import Metrics
from proxy.stats import base_url, main_stats
from tests.fakes.server import serve
from tests.traffic import KEY, MODELS, OffsetClock, build_app, record_traffic, require_key


@pytest.fixture
def clock() -> OffsetClock:
    return OffsetClock()


@pytest.fixture
def metrics(clock: OffsetClock) -> Metrics:
    return Metrics(clock=clock, process_metrics=False)


@pytest.fixture
def url(metrics: Metrics) -> Iterator[str]:
    with serve(build_app(metrics)) as base:
        yield base


def run(url: str, key: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main_stats(url, key, out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_prints_totals_models_stages_and_the_last_ten_requests(url, metrics, clock):
    saved = record_traffic(metrics, clock, 15)
    code, out, err = run(url + "/v1/")  # a client's base_url works as well
    assert code == 0 and err == ""
    assert f"tokens saved  {saved:,} of " in out
    assert "requests      15 (" in out
    lines = out.splitlines()
    for model in MODELS:
        assert any(line.lstrip().startswith(model) for line in lines), model
    assert "by stage" in out and any(line.lstrip().startswith("tools ") for line in lines)
    recent = lines[lines.index("last 10 requests") + 2 :]
    assert len(recent) == 10
    assert all(len(line) <= 120 for line in lines), max(lines, key=len)
    print(out)  # the figure a human reads (pytest -s)


def test_empty_proxy(url):
    code, out, _ = run(url)
    assert code == 0
    assert "tokens saved  0 of 0 (0.0%)" in out and "no requests yet" in out


def test_hostile_names_cannot_reach_the_terminal(url, metrics):
    metrics.observe_request("chat", status=200, duration_s=0.1, model="evil\x1b]0;pwned\x07model")
    code, out, _ = run(url)
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "evil]0;pwnedmodel" in out


def test_key_is_sent_as_bearer(metrics):
    with serve(build_app(metrics, require_key)) as locked:
        code, out, err = run(locked)
        assert code == 1 and out == "" and "pass --key" in err
        code, _, err = run(locked, "wrong")
        assert code == 1 and "refused" in err
        code, out, _ = run(locked, KEY)
        assert code == 0 and "tokens saved" in out


def test_unreachable_proxy_fails_cleanly():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    code, out, err = run(f"http://127.0.0.1:{port}")
    assert code == 1 and out == "" and "cannot reach" in err


def test_not_a_stats_document(url):
    code, _, err = run(url + "/nothing-here")
    assert code == 1 and "404" in err


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"),
        ("127.0.0.1:8080/dashboard", "http://127.0.0.1:8080"),
        ("https://proxy.example/shrink/stats", "https://proxy.example/shrink"),
    ],
)
def test_base_url(given, base):
    assert base_url(given) == base


def test_stats_and_the_dashboard_agree_on_latency_and_say_over_what(url, metrics, clock):
    """The terminal asks for 10 rows and the dashboard for 50; the percentiles are of the same
    ring of recent requests either way, and both say how many."""
    import httpx

    record_traffic(metrics, clock, 40)
    ten = httpx.get(f"{url}/stats?recent=10").json()["latency"]
    fifty = httpx.get(f"{url}/stats?recent=50").json()["latency"]
    assert ten == fifty and ten["requests"] == 40
    code, out, _ = run(url)
    assert code == 0 and "(last 40 requests)" in out


def test_prints_what_fit_as_sent_and_the_prefix_cache(url, metrics):
    from proxy.pipeline.types import Report

    fits = Report(tokens_before=1000, tokens_after=600, budget=2000, window=4096)
    never = Report(tokens_before=9000, tokens_after=1900, budget=2000, window=4096)
    for r in (fits, never):
        metrics.observe_request(
            "chat", status=200, duration_s=0.2, model="m", report=r, prefix_reuse=(1900, 1500)
        )
    code, out, _ = run(url)
    assert code == 0
    assert "tokens saved  7,500 of 10,000 (75.0%)" in out
    assert "that fit    400 of 1,000 (40.0%) on the 1 requests" in out
    assert "prefix cache" in out and "3,800   3,000  79.0%" in out
    assert "0 cut moves" in out
