"""Metrics: counts, label bounding, the recent ring, the per-minute series, the text exposition."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from proxy.collectors import OTHER, UNKNOWN, LabelBound
from proxy.metrics import NO_MODEL, Metrics
from proxy.pipeline.types import Report, StageAction
from proxy.usage import percentile


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def report(before: int, after: int, **actions: int) -> Report:
    r = Report(tokens_before=before, tokens_after=after, budget=8000, window=8192)
    r.actions.update(actions)
    share = (before - after) // max(len(actions), 1)
    for stage in actions:
        r.details.append(StageAction(stage, 1, "x", share, 0))
    return r


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, parsed back by prometheus_client's own parser."""
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_request_counts_tokens_and_stages_in_the_exposition():
    m = Metrics(clock=Clock(), process_metrics=False)
    m.observe_request(
        "chat",
        status=200,
        duration_s=1.5,
        ttfb_s=0.25,
        shrink_s=0.002,
        model="qwen",
        report=report(10_000, 4_000, tools=2, trim=6),
    )
    m.observe_request("chat", status=200, duration_s=0.5, model="qwen", report=report(500, 500))
    m.observe_request("passthrough", status=404, duration_s=0.01, upstream_error="404")
    got = samples(m)
    assert (
        got[("shrink_requests_total", (("model", "qwen"), ("route", "chat"), ("status", "200")))]
        == 2
    )
    assert got[("shrink_tokens_before_total", (("model", "qwen"),))] == 10_500
    assert got[("shrink_tokens_after_total", (("model", "qwen"),))] == 4_500
    assert got[("shrink_tokens_saved_total", (("model", "qwen"),))] == 6_000
    assert got[("shrink_actions_total", (("stage", "tools"),))] == 2
    assert got[("shrink_actions_total", (("stage", "trim"),))] == 6
    assert got[("shrink_actions_total", (("stage", "truncate"),))] == 0  # pre-declared
    assert got[("shrink_stage_tokens_saved_total", (("stage", "tools"),))] == 3_000
    assert got[("shrink_upstream_errors_total", (("code", "404"), ("route", "passthrough")))] == 1
    assert got[("shrink_upstream_ttfb_seconds_count", (("route", "chat"),))] == 1
    assert got[("shrink_upstream_ttfb_seconds_bucket", (("le", "0.25"), ("route", "chat")))] == 1
    assert got[("shrink_request_duration_seconds_sum", (("route", "chat"),))] == 2.0
    assert got[("shrink_pipeline_duration_seconds_count", (("route", "chat"),))] == 1
    assert not any(name.startswith("process_") for name, _ in got)


def test_requests_that_never_reached_the_upstream_add_no_tokens():
    m = Metrics(clock=Clock(), process_metrics=False)
    too_big = report(50_000, 40_000, trim=3)
    m.observe_request(
        "chat",
        status=400,
        duration_s=0.01,
        model="qwen",
        report=too_big,
        sent=False,
        error="context_length_exceeded",
    )
    stats = m.stats()
    assert stats["totals"]["requests"] == 1
    assert stats["totals"]["tokens_before"] == 0 and stats["by_model"] == []
    assert stats["totals"]["errors"] == 1
    row = stats["recent"][0]
    assert (row["tokens_before"], row["tokens_after"], row["saved"]) == (50_000, 40_000, 0)
    got = samples(m)
    assert (
        got[("shrink_errors_total", (("code", "context_length_exceeded"), ("route", "chat")))] == 1
    )
    assert got[("shrink_actions_total", (("stage", "trim"),))] == 0


def test_model_labels_are_bounded():
    m = Metrics(max_models=3, clock=Clock(), process_metrics=False)
    for i in range(10):
        m.observe_request("chat", status=200, duration_s=0.1, model=f"m{i}", report=report(10, 5))
    m.observe_request("chat", status=200, duration_s=0.1, model=None, report=report(10, 5))
    m.observe_request("chat", status=200, duration_s=0.1, model=["x"], report=report(10, 5))
    models = {
        dict(labels)["model"]
        for (name, labels) in samples(m)
        if name == "shrink_tokens_saved_total"
    }
    # A request that names no model is "none"; one whose name cannot be shown, "unknown".
    assert models == {"m0", "m1", "m2", OTHER, UNKNOWN, NO_MODEL}
    by_model = {row["model"]: row["requests"] for row in m.stats()["by_model"]}
    assert by_model == {"m0": 1, "m1": 1, "m2": 1, OTHER: 7, UNKNOWN: 1, NO_MODEL: 1}


def test_label_bound_cleans_and_truncates():
    bound = LabelBound(2)
    assert bound("a\nb\x00c") == "abc"
    assert len(bound("x" * 1000)) == 100
    assert bound("third") == OTHER
    assert bound("abc") == "abc"  # already seen: keeps its name
    assert bound("") == UNKNOWN and bound(None) == UNKNOWN and bound("\n") == UNKNOWN


def test_recent_ring_is_bounded_and_newest_first():
    m = Metrics(recent_size=5, clock=Clock(), process_metrics=False)
    for i in range(12):
        m.observe_request("chat", status=200, duration_s=i, request_id=f"req-{i}", model="q")
    stats = m.stats(recent=200)
    assert [r["request_id"] for r in stats["recent"]] == [f"req-{i}" for i in (11, 10, 9, 8, 7)]
    assert stats["totals"]["requests"] == 12
    assert [r["request_id"] for r in m.stats(recent=2)["recent"]] == ["req-11", "req-10"]
    assert m.stats(recent=0)["recent"] == []


def test_request_ids_are_short_and_printable():
    m = Metrics(clock=Clock(), process_metrics=False)
    m.observe_request("chat", status=200, duration_s=0.1, request_id="a\x1b[31m" + "z" * 500)
    rid = m.stats()["recent"][0]["request_id"]
    assert rid.startswith("a[31m") and len(rid) <= 64 and rid.isprintable()


def test_series_buckets_per_minute_and_drops_old_minutes():
    clock = Clock(1_700_000_000.0 - 1_700_000_000.0 % 60)  # start of a minute
    m = Metrics(series_minutes=3, clock=clock, process_metrics=False)
    for minute, before in enumerate((100, 200, 300, 400, 500)):
        clock.now += 60 if minute else 0
        m.observe_request("chat", status=200, duration_s=0.1, model="q", report=report(before, 10))
        clock.now += 1
        m.observe_request("chat", status=200, duration_s=0.1, model="q", report=report(before, 10))
    points = m.stats()["series"]["points"]
    # Three buckets kept (the deque's bound), each holding both requests of its minute.
    assert [p[1:] for p in points] == [[600, 20, 580, 2], [800, 20, 780, 2], [1000, 20, 980, 2]]
    assert all(p[0] % 60 == 0 for p in points)
    # A window of two minutes keeps only the last two buckets.
    assert len(m.stats(minutes=2)["series"]["points"]) == 2
    # Totals still count everything.
    assert m.stats()["totals"]["tokens_before"] == 3000


def test_series_skips_idle_minutes_and_prunes_by_time():
    clock = Clock(6_000_000.0)
    m = Metrics(clock=clock, process_metrics=False)
    m.observe_request("chat", status=200, duration_s=0.1, model="q", report=report(100, 50))
    clock.now += 3 * 3600
    m.observe_request("chat", status=200, duration_s=0.1, model="q", report=report(100, 50))
    assert len(m.stats()["series"]["points"]) == 2
    assert len(m.stats(minutes=60)["series"]["points"]) == 1
    clock.now += 25 * 3600
    assert m.stats()["series"]["points"] == []


def test_stats_totals_percentages_and_latency():
    m = Metrics(clock=Clock(), process_metrics=False)
    m.observe_request(
        "chat", status=200, duration_s=1, ttfb_s=0.1, model="a", report=report(1000, 250, tools=1)
    )
    m.observe_request(
        "chat", status=200, duration_s=3, ttfb_s=0.3, model="b", report=report(1000, 1000)
    )
    m.observe_request("chat", status=499, duration_s=2, model="b", client_disconnected=True)
    s = m.stats()
    t = s["totals"]
    assert (t["tokens_before"], t["tokens_after"], t["tokens_saved"]) == (2000, 1250, 750)
    assert t["saved_pct"] == 37.5 and t["shrunk"] == 1 and t["counted_requests"] == 2
    assert t["client_disconnects"] == 1 and t["errors"] == 0  # a client leaving is no error
    assert [row["model"] for row in s["by_model"]] == ["a", "b"]  # most saved first
    assert s["by_stage"] == [{"stage": "tools", "actions": 1, "requests": 1, "tokens_saved": 750}]
    assert s["latency"] == {
        "requests": 3,
        "duration_p50_ms": 2000.0,
        "duration_p95_ms": 3000.0,
        "ttfb_p50_ms": 100.0,
        "ttfb_p95_ms": 300.0,
    }
    assert samples(m)[("shrink_client_disconnects_total", (("route", "chat"),))] == 1


def test_summaries_windows_and_caches():
    m = Metrics(clock=Clock(), process_metrics=False)
    m.observe_summary("ok", 2.0)
    m.observe_summary("ok", 4.0)
    m.observe_summary("cached")
    m.observe_summary("timeout", 30.0)
    m.set_window("qwen", 32768)
    m.set_window("qwen", 65536)
    discovered = {"llama": 8192}
    m.watch_windows(lambda: discovered)
    m.watch_windows(lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    hits = [0]
    m.watch_cache("tokens", lambda: (hits[0], 4, 9))
    m.watch_cache("broken", lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    hits[0] = 12
    got = samples(m)
    assert got[("shrink_summarizer_calls_total", (("outcome", "ok"),))] == 2
    assert got[("shrink_summarizer_calls_total", (("outcome", "cached"),))] == 1
    assert got[("shrink_summarizer_duration_seconds_count", (("outcome", "ok"),))] == 2
    assert ("shrink_summarizer_duration_seconds_count", (("outcome", "cached"),)) not in got
    assert got[("shrink_model_window_tokens", (("model", "qwen"),))] == 65536
    assert got[("shrink_model_window_tokens", (("model", "llama"),))] == 8192
    assert got[("shrink_cache_hits_total", (("cache", "tokens"),))] == 12
    assert got[("shrink_cache_misses_total", (("cache", "tokens"),))] == 4
    assert got[("shrink_cache_entries", (("cache", "tokens"),))] == 9
    s = m.stats()
    assert s["summarizer"]["ok"] == {"calls": 2, "avg_latency_s": 3.0}
    assert s["windows"] == {"qwen": 65536, "llama": 8192}
    discovered["qwen"] = 131072  # discovery wins over the configured value
    assert m.stats()["windows"]["qwen"] == 131072
    assert s["caches"] == {"tokens": {"hits": 12, "misses": 4, "entries": 9, "hit_rate": 0.75}}


def test_each_app_has_its_own_registry():
    a, b = Metrics(), Metrics()
    a.observe_request("chat", status=200, duration_s=0.1, model="only-in-a")
    assert b"only-in-a" in a.render()[0]
    assert b"only-in-a" not in b.render()[0]
    assert REGISTRY.get_sample_value("shrink_requests_total", {"route": "chat"}) is None
    assert b"process_cpu_seconds_total" in a.render()[0]


def test_percentile_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.95) == 5.0
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.95) == 95.0


def test_upstream_prompt_tokens_are_counted_and_kept_in_the_ring():
    m = Metrics(clock=Clock(), process_metrics=False)
    m.observe_request(
        "chat",
        status=200,
        duration_s=1,
        model="q",
        report=report(900, 600),
        upstream_prompt_tokens=612,
    )
    m.observe_request("chat", status=200, duration_s=1, model="q", report=report(900, 600))
    assert samples(m)[("shrink_upstream_prompt_tokens_total", (("model", "q"),))] == 612
    assert [r["upstream_tokens"] for r in m.stats()["recent"]] == [None, 612]


def test_savings_on_requests_that_fit_as_sent_are_kept_apart():
    """A prompt over its budget could never have been sent as it was: what shrinking removed
    from it is not what the backend was spared. Those that fit are counted on their own."""
    m = Metrics(clock=Clock(), process_metrics=False)
    fits = Report(tokens_before=1000, tokens_after=600, budget=2000, window=4096)
    never = Report(tokens_before=9000, tokens_after=1900, budget=2000, window=4096)
    for r in (fits, never):
        m.observe_request("chat", status=200, duration_s=0.1, model="m", report=r)
    t = m.stats()["totals"]
    assert t["tokens_saved"] == 7500 and t["saved_pct"] == 75.0
    assert t["fit_as_sent"] == {
        "requests": 1,
        "shrunk": 1,
        "tokens_before": 1000,
        "tokens_after": 600,
        "tokens_saved": 400,
        "saved_pct": 40.0,
    }
    got = samples(m)
    assert got[("shrink_fitting_tokens_before_total", (("model", "m"),))] == 1000
    assert got[("shrink_fitting_tokens_saved_total", (("model", "m"),))] == 400
    assert [r["fit_as_sent"] for r in m.stats()["recent"]] == [False, True]


def test_cut_tracker_counts_moves_per_root_and_stays_bounded():
    from proxy.cuts import CutTracker, conversation_root, cut_of

    t = CutTracker(max_conversations=2)
    assert not t.moved(b"a", 0)  # first sight: nothing to compare with
    assert not t.moved(b"a", 0) and t.moved(b"a", 5) and not t.moved(b"a", 5)
    t.moved(b"b", 1)
    t.moved(b"c", 1)
    assert len(t) == 2 and not t.moved(b"a", 9)  # "a" was evicted: seen afresh
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    root = conversation_root(msgs)
    assert root == conversation_root([*msgs, {"role": "assistant", "content": "later"}])
    assert root != conversation_root([msgs[0], {"role": "user", "content": "other"}])
    assert conversation_root([{"role": "system", "content": "s"}]) is None
    r = Report()
    assert cut_of(r) == 0
    r.details.append(StageAction("trim", 7, "x", 100, 0))
    assert cut_of(r) == 7
