"""`shrink-proxy stats`: what a running proxy saved, printed in the terminal from its `/stats`.

The same summary as /dashboard, as compact tables: totals, savings by model and by stage, and the
last requests. Strings from the server (model names, request ids) are stripped of control
characters before printing, so a hostile name cannot drive the terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import httpx

SUFFIXES = ("/v1", "/stats", "/dashboard", "/metrics")
NAME_WIDTH = 28


def main_stats(
    url: str,
    key: str | None,
    out: TextIO = sys.stdout,
    *,
    err: TextIO | None = None,
    recent: int = 10,
    timeout: float = 10.0,
) -> int:
    """Fetch `<url>/stats` and print the summary; 0 on success, 1 when it cannot be fetched."""
    err = err or sys.stderr
    base = base_url(url)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(f"{base}/stats", params={"recent": recent}, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        print(f"shrink-proxy stats: cannot reach {base}: {exc}", file=err)
        return 1
    if r.status_code == 401:
        hint = "the key was refused" if key else "this proxy requires its key: pass --key"
        print(f"shrink-proxy stats: {base}/stats answered 401 ({hint})", file=err)
        return 1
    if r.status_code != 200:
        print(f"shrink-proxy stats: {base}/stats answered {r.status_code}", file=err)
        return 1
    try:
        data = r.json()
        text = render(data, base)
    except (ValueError, KeyError, TypeError) as exc:
        print(
            f"shrink-proxy stats: {base}/stats is not a shrink-proxy stats document: {exc}",
            file=err,
        )
        return 1
    out.write(text)
    return 0


def base_url(url: str) -> str:
    """Accept the proxy's address as users have it: with /v1 (a client's base_url) or a page."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    for suffix in SUFFIXES:
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def render(s: dict[str, Any], base: str) -> str:
    t, lat = s["totals"], s["latency"]
    fit = t.get("fit_as_sent")
    lines = [
        f"shrink-proxy {clean(s.get('version', '?'))} at {base} · up {uptime(s['uptime_s'])}",
        "",
        f"tokens saved  {t['tokens_saved']:,} of {t['tokens_before']:,} ({t['saved_pct']:.1f}%)"
        f" · {t['tokens_after']:,} sent upstream",
    ]
    if fit is not None:
        lines.append(
            f"  that fit    {fit['tokens_saved']:,} of {fit['tokens_before']:,}"
            f" ({fit['saved_pct']:.1f}%) on the {fit['requests']:,} requests whose prompt"
            " already fit its budget"
        )
    lines += [
        f"requests      {t['requests']:,} ({t['shrunk']:,} shrunk, {t['in_flight']} in flight)"
        f" · {t['errors']:,} errors · {t['client_disconnects']:,} client disconnects",
        f"latency       p50 {ms(lat['duration_p50_ms'])} · p95 {ms(lat['duration_p95_ms'])}"
        f" · first byte p50 {ms(lat['ttfb_p50_ms'])}" + over(lat),
    ]
    if "cut_moves" in t:
        lines.append(
            f"cache         {t['cut_moves']:,} cut moves · "
            f"{t.get('calibration_changes', 0):,} calibration changes"
        )
    if s["by_model"]:
        lines += ["", "by model"]
        lines += table(
            ["model", "requests", "before", "after", "saved", "%", "window"],
            [
                [
                    name(m["model"]),
                    f"{m['requests']:,}",
                    f"{m['tokens_before']:,}",
                    f"{m['tokens_after']:,}",
                    f"{m['tokens_saved']:,}",
                    f"{m['saved_pct']:.1f}",
                    f"{m['window']:,}" if m.get("window") else "-",
                ]
                for m in s["by_model"]
            ],
        )
    reuse = (s.get("prefix_cache") or {}).get("by_model") or []
    if reuse:
        lines += ["", "prefix cache (as the backend reported it)"]
        lines += table(
            ["model", "requests", "prompt", "cached", "reuse"],
            [
                [
                    name(c["model"]),
                    f"{c['requests']:,}",
                    f"{c['prompt_tokens']:,}",
                    f"{c['cached_tokens']:,}",
                    f"{c['reuse_pct']:.1f}%",
                ]
                for c in reuse
            ],
        )
    if s["by_stage"]:
        lines += ["", "by stage"]
        lines += table(
            ["stage", "actions", "requests", "saved"],
            [
                [
                    name(x["stage"]),
                    f"{x['actions']:,}",
                    f"{x['requests']:,}",
                    f"{x['tokens_saved']:,}",
                ]
                for x in s["by_stage"]
            ],
        )
    recent = s["recent"]
    lines += ["", f"last {len(recent)} requests" if recent else "no requests yet"]
    if recent:
        lines += table(
            ["time", "status", "model", "before", "after", "saved", "actions", "duration"],
            [request_row(r) for r in recent],
            left=(0, 1, 2, 6),
        )
    return "\n".join(lines) + "\n"


def request_row(r: dict[str, Any]) -> list[str]:
    before, after = r.get("tokens_before"), r.get("tokens_after")
    saved = "-"
    if before and after is not None:
        saved = f"{100 * max(before - after, 0) / before:.0f}%"
    error = clean(r.get("error") or "")
    status = str(r["status"]) + (f" {error}" if error and error != str(r["status"]) else "")
    actions = ",".join(f"{clean(k)}:{v}" for k, v in r["actions"].items()) or "none"
    model = r["model"] if r.get("model") is not None else r.get("path") or r["route"]
    return [
        time.strftime("%H:%M:%S", time.localtime(r["ts"])),
        status,
        name(model),
        f"{before:,}" if before is not None else "-",
        f"{after:,}" if after is not None else "-",
        saved,
        actions,
        ms(r["duration_ms"]),
    ]


def over(latency: dict[str, Any]) -> str:
    """Which requests the percentiles are of: the proxy's ring of recent requests, the same for
    this command and the dashboard, however many rows each shows."""
    n = latency.get("requests")
    return f" (last {n:,} requests)" if isinstance(n, int) else ""


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (0,)
) -> list[str]:
    """Columns in `left` (text) left-aligned, the others (numbers) right-aligned."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(parts).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def clean(value: object) -> str:
    return "".join(c for c in str(value) if c.isprintable())


def name(value: object) -> str:
    text = clean(value)
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def uptime(seconds: float) -> str:
    s = int(seconds)
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    return f"{d}d {h}h" if d else f"{h}h {m}m" if h else f"{m}m {s % 60}s" if m else f"{s}s"
