"""One case in one process: the body read and parsed as the proxy does, planned cold, timed
against one tiktoken encode of its texts, its peak memory read, its plan checked.

Runs in a process forked from `bench.adversarial.forks`' worker, which has imported everything
and loaded the encoding (startup work, as the app's lifespan does it) and planned one small
request, so the fork meets a process in the state of a proxy that has just started serving: the
count cache and the stage-1 memo hold nothing of the case. Memory is the growth of peak RSS
(VmHWM, reset at the start) over the RSS before the body's bytes are read: bytes, parsed body
and plan, what the proxy holds for one request. It is reported per byte of body.
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from pathlib import Path
from typing import Any

import orjson

from bench import corpus
from bench.adversarial import invariants
from bench.overhead import procs
from proxy import wire
from proxy.shrinker import Shrinker
from proxy.tokenizers import Tokenizers

_TOKENIZERS: list[Tokenizers] = []
WARM_BODY = {
    "model": corpus.MODEL,
    "messages": [
        {"role": "system", "content": "warm-up"},
        {"role": "user", "content": "Import every module a plan touches. " * 400},
        {"role": "assistant", "content": "ok " * 3000},
        {"role": "user", "content": "and again"},
    ],
}


def prepare() -> None:
    """Once, in the worker before it forks: imports, encoding, one small plan (inline, so no
    helper thread exists to be lost by the fork)."""
    corpus.setup_environment()
    tokenizers = corpus.tokenizers()
    Shrinker(corpus.settings(context_window=1024), tokenizers).plan_sync(
        wire.parse_chat(orjson.dumps(WARM_BODY)), "auto", ahead=False
    )
    _TOKENIZERS.append(tokenizers)


def digest(messages: Any) -> str:
    try:
        data = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        data = repr(messages).encode(errors="surrogatepass")
    return hashlib.sha256(data).hexdigest()


def texts_of(body: dict[str, Any]) -> str:
    """What one encode of the body covers: every message text and call argument, the tools."""
    text = corpus.haystack(body["messages"]).replace("\0", "\n")
    if body.get("tools"):
        text += "\n" + orjson.dumps(body["tools"]).decode()
    return text


def where(exc: BaseException) -> str:
    """The innermost frame of the proxy's own code the exception passed through."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/proxy/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('/proxy/', 1)[1]}:{f.lineno} {f.name}"


def run(job: dict[str, Any]) -> dict[str, Any]:
    """job: body (a file), window, settings, mode, run ("measure" or "replay")."""
    pid = os.getpid()
    procs.reset_peak_rss(pid)
    rss0 = procs.rss_mb(pid)
    raw = Path(job["body"]).read_bytes()
    try:
        body = wire.parse_chat(raw)
        shrinker = Shrinker(
            corpus.settings(context_window=job["window"], **job["settings"]), _TOKENIZERS[0]
        )
        start = time.perf_counter()
        plan = shrinker.plan_sync(body, job["mode"])
        plan_s = time.perf_counter() - start
    except BaseException as e:  # RecursionError and MemoryError too: that is the finding
        return {"error": type(e).__name__, "message": str(e)[:300], "where": where(e)}
    peak_mb = procs.peak_rss_mb(pid) - rss0
    out: dict[str, Any] = {"plan_s": plan_s, "digest": digest(plan.messages)}
    if job["run"] == "replay":
        return out
    counter = _TOKENIZERS[0].for_model(body.get("model"))
    failed = invariants.check(body, raw, plan, counter, shrinker.policy.keep_last)
    text = texts_of(body)
    assert counter.encoding is not None
    start = time.perf_counter()
    tokens = len(counter.encoding.encode_ordinary(text))
    encode_s = time.perf_counter() - start
    r = plan.report
    return {
        **out,
        "encode_s": encode_s,
        "text_tokens": tokens,
        "body_bytes": len(raw),
        "messages": len(body["messages"]),
        "peak_mb": peak_mb,
        "rss0_mb": rss0,
        "failed": failed,
        "report": {
            "tokens_before": r.tokens_before,
            "tokens_after": r.tokens_after,
            "budget": r.budget,
            "fits": r.fits,
            "actions": r.actions_header,
            "notes": r.notes,
        },
    }
