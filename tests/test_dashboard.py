"""/metrics, /stats and /dashboard under a real uvicorn, and the page in a real headless Chromium.

The router is mounted on a small app of the tests' own (see tests/traffic.py), not on the proxy.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi.responses import StreamingResponse
from prometheus_client.parser import text_string_to_metric_families

from proxy.inflight import InFlight
from proxy.metrics import Metrics
from tests.fakes.server import serve
from tests.traffic import KEY, MODELS, OffsetClock, build_app, record_traffic, require_key

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - CI installs it
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture
def clock() -> OffsetClock:
    return OffsetClock()


@pytest.fixture
def metrics(clock: OffsetClock) -> Metrics:
    return Metrics(clock=clock)


@pytest.fixture
def url(metrics: Metrics) -> Iterator[str]:
    with serve(build_app(metrics)) as base:
        yield base


@pytest.fixture
def locked_url(metrics: Metrics) -> Iterator[str]:
    with serve(build_app(metrics, require_key)) as base:
        yield base


def test_metrics_endpoint_serves_parseable_prometheus_text(url, metrics, clock):
    record_traffic(metrics, clock, 5)
    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    requests = sum(
        s.value for s in families["shrink_requests"].samples if s.name == "shrink_requests_total"
    )
    assert requests == 5
    assert "shrink_tokens_saved" in families and "process_cpu_seconds" in families


def test_stats_json_matches_what_was_recorded(url, metrics, clock):
    saved = record_traffic(metrics, clock, 12)
    r = httpx.get(f"{url}/stats")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    s = r.json()
    assert s["totals"]["requests"] == 12 and s["totals"]["tokens_saved"] == saved
    assert {m["model"] for m in s["by_model"]} == set(MODELS)
    assert sum(m["tokens_saved"] for m in s["by_model"]) == saved
    assert {st["stage"] for st in s["by_stage"]} <= {"tools", "trim"}
    assert len(s["recent"]) == 12 and s["recent"][0]["request_id"].startswith("req-0011")
    assert sum(p[3] for p in s["series"]["points"]) == saved
    assert s["version"]
    assert len(httpx.get(f"{url}/stats?recent=3").json()["recent"]) == 3
    assert len(httpx.get(f"{url}/stats?recent=junk").json()["recent"]) == 12
    assert len(httpx.get(f"{url}/stats?recent=-5").json()["recent"]) == 0
    assert len(httpx.get(f"{url}/stats?minutes=1").json()["series"]["points"]) == 1


def test_dashboard_page_is_self_contained(url):
    r = httpx.get(f"{url}/dashboard")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "<canvas" in html and "stats" in html
    # Nothing from another origin: no absolute URLs at all, no protocol-relative src/href.
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?//""", html)
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp and "sha256-" in csp
    assert r.headers["referrer-policy"] == "no-referrer"


def test_auth_callback_guards_all_three_routes(locked_url):
    bearer = {"authorization": f"Bearer {KEY}"}
    for path in ("/metrics", "/stats", "/dashboard"):
        r = httpx.get(locked_url + path)
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(locked_url + path, headers=bearer).status_code == 200, path
    # A browser cannot send headers when it navigates: the page accepts ?key= ...
    assert httpx.get(f"{locked_url}/dashboard?key={KEY}").status_code == 200
    assert httpx.get(f"{locked_url}/dashboard?key=wrong").status_code == 401
    # ... but the data routes do not (the page sends the key as a header instead).
    assert httpx.get(f"{locked_url}/stats?key={KEY}").status_code == 401


def test_in_flight_counts_streaming_responses_until_they_end(metrics):
    release = threading.Event()

    async def slow_stream():
        yield b"first\n"
        await anyio.to_thread.run_sync(release.wait, 10)
        yield b"last\n"

    app = build_app(metrics)

    @app.get("/v1/slow")
    async def slow() -> StreamingResponse:
        return StreamingResponse(slow_stream())

    app.add_middleware(InFlight, get_metrics=lambda scope: scope["app"].state.shrink.metrics)

    def in_flight(base: str) -> int:
        return httpx.get(f"{base}/stats").json()["totals"]["in_flight"]

    with serve(app) as base, httpx.Client() as client:
        with client.stream("GET", f"{base}/v1/slow") as resp:
            lines = resp.iter_lines()  # one iterator: a discarded one closes the stream
            assert next(lines) == "first"
            assert in_flight(base) == 1  # /stats itself is not counted
            release.set()
            assert list(lines) == ["last"]
        deadline = time.monotonic() + 5
        while in_flight(base) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert in_flight(base) == 0


# --- the page in a real browser -------------------------------------------------------------------

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        pytest.skip("playwright is not installed (.venv/bin/pip install playwright)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_page(browser, url: str, color_scheme: str = "light"):
    """A page that records console errors, page errors and every URL it requests."""
    page = browser.new_page(viewport={"width": 1360, "height": 900}, color_scheme=color_scheme)
    errors: list[str] = []
    requested: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requested.append(r.url))
    page.goto(url)
    # Selectors, not wait_for_function: the page's CSP forbids the eval that the latter needs.
    page.wait_for_selector("body[data-loaded='1']", timeout=10_000)
    return page, errors, requested


def rows(page) -> int:
    return page.locator("#recent tr").count()


@pytest.mark.browser
def test_dashboard_renders_recorded_traffic_in_chromium(browser, url, metrics, clock):
    saved = record_traffic(metrics, clock, 24)
    for model, window in zip(MODELS, (32_768, 131_072, 128_000), strict=True):
        metrics.set_window(model, window)
    metrics.watch_cache("token_counts", lambda: (9_120, 1_480, 5_211))
    metrics.watch_cache("stage1_memo", lambda: (311, 95, 406))
    metrics.observe_summary("ok", 2.4)
    metrics.observe_summary("cached")
    page, errors, requested = open_page(browser, f"{url}/dashboard")
    try:
        assert page.text_content("#saved-total") == f"{saved:,}"
        assert rows(page) == 24
        assert page.locator("#models .track").count() == len(MODELS)
        assert page.locator("#stages .track").count() >= 1
        assert "qwen2.5-coder:32b" in (page.text_content("#recent") or "")
        # It polls: new traffic shows up without a reload.
        more = record_traffic(metrics, clock, 6, span_s=60)
        expect(page.locator("#recent tr")).to_have_count(30, timeout=10_000)
        assert page.text_content("#saved-total") == f"{saved + more:,}"
        assert "131,072 tokens" in (page.text_content("#windows") or "")
        assert "77%" in (page.text_content("#caches") or "")  # 311 / (311 + 95)
        box = page.locator("#chart").bounding_box()
        assert box is not None
        page.hover("#chart", position={"x": box["width"] - 20, "y": 150})  # the newest minute
        expect(page.locator("#tip")).to_be_visible()
        # The newest minute holds requests unless the clock just turned over a minute.
        assert re.search(r"request.*saved|no requests", page.text_content("#tip") or "")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        # The range buttons fetch the series for that range at once, not at the next poll.
        with page.expect_request(lambda r: "minutes=1440" in r.url, timeout=5_000):
            page.click("#range button[data-min='1440']")
        expect(page.locator("#range button.on")).to_have_text("24h")
        assert errors == []
        assert all(u.startswith((url, "data:")) for u in requested), requested
    finally:
        page.close()
    page, errors, _ = open_page(browser, f"{url}/dashboard", color_scheme="dark")
    try:
        page.screenshot(path=str(ARTIFACTS / "dashboard-dark.png"), full_page=True)
        assert errors == []
    finally:
        page.close()


@pytest.mark.browser
def test_dashboard_sends_the_query_key_when_polling(browser, locked_url, metrics, clock):
    saved = record_traffic(metrics, clock, 3)
    page, errors, _ = open_page(browser, f"{locked_url}/dashboard?key={KEY}")
    try:
        assert page.text_content("#saved-total") == f"{saved:,}"
        assert rows(page) == 3
        assert errors == []
    finally:
        page.close()


@pytest.mark.browser
def test_dashboard_shows_an_empty_state_without_errors(browser, url):
    page, errors, _ = open_page(browser, f"{url}/dashboard")
    try:
        assert page.text_content("#saved-total") == "0"
        assert page.is_visible("#chart-empty")
        assert "No requests yet" in (page.text_content("#recent") or "")
        assert errors == []
    finally:
        page.close()


def record_busy_rows(metrics: Metrics, n: int = 12) -> list[str]:
    """Rows as a busy proxy has them: ids it made itself, long model names, several actions,
    long error codes, pass-through requests, and prefix-cache reports."""
    from proxy.pipeline.types import Report
    from proxy.upstream import new_request_id

    ids = []
    for i in range(n):
        r = Report(tokens_before=40_000 + i, tokens_after=9_000, budget=28_000, window=32_768)
        for stage, k in (("tools", 4), ("trim", 31), ("truncate", 2), ("facts", 12)):
            r.count(stage, k)
        rid = new_request_id()
        ids.append(rid)
        metrics.observe_request(
            "chat",
            status=502 if i % 3 == 0 else 200,
            duration_s=12.5,
            ttfb_s=1.25,
            model="hf.co/unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M",
            report=r,
            request_id=rid,
            mode="auto",
            upstream_error="upstream_unavailable" if i % 3 == 0 else None,
            prefix_reuse=(9_000, 8_100) if i % 3 else None,
        )
    metrics.observe_request(
        "passthrough", status=200, duration_s=0.01, request_id=new_request_id(), path="/v1/models"
    )
    return ids


@pytest.mark.browser
@pytest.mark.parametrize("width", [1360, 1024])
def test_request_table_fits_its_card_and_ids_are_distinguishable(browser, url, metrics, width):
    ids = record_busy_rows(metrics)
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{url}/dashboard")
        page.wait_for_selector("body[data-loaded='1']", timeout=10_000)
        card = page.locator(".table-card").bounding_box()
        assert card is not None
        for header in ("Duration", "First byte"):
            box = page.locator("th", has_text=header).bounding_box()
            assert box is not None and box["x"] + box["width"] <= card["x"] + card["width"], header
        shown = [
            page.text_content(f"#recent tr:nth-child({k + 2}) td:nth-child(2)") for k in range(12)
        ]
        assert len(set(shown)) == 12, shown  # they used to read "shrink-b314fd6" alike
        assert all(
            text and text.lstrip("…") in rid for text, rid in zip(shown, ids[::-1], strict=True)
        )
        first = page.locator("#recent tr").first
        assert (first.locator("td").nth(2).text_content() or "") == "/v1/models"
        assert "unknown" not in (page.text_content("#recent") or "")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-busy-{width}.png"), full_page=True)
        assert errors == []
    finally:
        page.close()


@pytest.mark.browser
def test_dashboard_says_what_the_savings_mean_and_shows_prefix_reuse(browser, url, metrics):
    from proxy.pipeline.types import Report

    fits = Report(tokens_before=1_000, tokens_after=600, budget=2_000, window=4_096)
    never = Report(tokens_before=99_000, tokens_after=1_900, budget=2_000, window=4_096)
    for r in (fits, never):
        metrics.observe_request(
            "chat", status=200, duration_s=0.3, model="m", report=r, prefix_reuse=(2_000, 1_500)
        )
    metrics.observe_calibration_change("m")
    page, errors, _ = open_page(browser, f"{url}/dashboard")
    try:
        assert page.text_content("#saved-total") == "97,500"
        assert "could not have been sent" in (page.get_attribute(".hero", "title") or "")
        assert page.text_content("#fit-saved") == "400" and page.text_content("#fit-pct") == "40%"
        assert page.text_content("#fit-req") == "1"
        assert page.text_content("#lat-over") == "over the last 2 requests"
        reuse = page.locator("#reuse [data-model='m']")
        expect(reuse).to_have_count(1)
        assert "75% reused" in (reuse.text_content() or "")
        assert reuse.locator(".spark i:not(.gap)").count() == 1  # one minute with traffic
        assert "1 calibration changes" in (page.text_content("#cache-moves") or "")
        assert errors == []
    finally:
        page.close()
