"""The window a request is planned for, and recovery when the backend says it was wrong.

A window configured for the model always wins; otherwise it comes from discovery (or from an
overflow error, which states the true limit), scaled by the learnt ratio between the backend's
counts and ours. An overflow answer before the first byte is parsed, remembered, and the request is
re-planned to the stated limit and sent once more. A usage count far below what was sent is how
a silently truncating backend (Ollama) shows itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from proxy.overflow import parse_overflow, retry_window, silent_truncation
from proxy.pipeline import Plan, Report
from proxy.pipeline.types import Mode
from proxy.sse import prompt_tokens
from proxy.wire.formats import CHAT_WIRE, WireFormat

if TYPE_CHECKING:
    from proxy.exchange import Exchange
    from proxy.state import AppState

OVERFLOW_BODY_LIMIT = 256 * 1024
TRUNCATION_WARNING = ("x-shrink-warning", "upstream-truncated")


class PlanWindow:
    """The `window_of` a request is planned with, on the chat routes and the preview alike.

    A window configured for the model always wins; else the discovered one, in our token units
    (scaled by the learnt calibration). It keeps the window the backend serves (or the
    configured one) before calibration: errors quote that, the figure the user can check.
    Mode `off` plans for no window at all (nothing is shrunk, nothing is discovered).
    """

    def __init__(self, state: AppState, mode: Mode) -> None:
        self.state = state
        self.mode = mode
        self.served: int | None = None  # before calibration; None: the configured default

    async def __call__(self, model: str | None) -> int | None:
        """The window to plan for; None means the configured default."""
        if self.mode == "off" or model is None:
            return None
        state = self.state
        explicit = state.settings.explicit_window_for(model)
        if explicit:
            self.served = explicit
            return explicit  # a window the user configured for this model always wins
        served = await state.discovery.window_for(model) if state.discovery else None
        self.served = served
        return state.calibration.adjust_window(model, served) if served else None


def overflow_inspectable(resp: httpx.Response) -> bool:
    """An error answer small and plain enough to read whole and parse (then relay verbatim)."""
    length = resp.headers.get("content-length")
    return (
        400 <= resp.status_code <= 599
        and "content-encoding" not in resp.headers
        and length is not None
        and length.isdigit()
        and int(length) <= OVERFLOW_BODY_LIMIT
    )


async def shrink_to_stated_limit(
    state: AppState,
    body: dict[str, Any],
    raw_size: int,
    mode: Mode,
    resp: httpx.Response,
    error: bytes,
    sent: Report,
    fmt: WireFormat = CHAT_WIRE,
) -> Plan | None:
    """A plan that fits the limit the backend just stated, or None: relay its error as it is."""
    overflow = parse_overflow(resp.status_code, error)
    if overflow is None:
        return None
    model = body.get("model")
    if isinstance(model, str):
        if overflow.limit and state.discovery is not None:
            state.discovery.remember(model, overflow.limit)
        calibrate(state, model, sent.tokens_after, overflow.prompt_tokens)
    window = retry_window(overflow, sent.tokens_after)
    if window is None:
        return None
    plan = await state.shrinker.plan(body, raw_size, mode, window, fmt=fmt)
    if not plan.report.fits or plan.report.tokens_after >= sent.tokens_after:
        return None  # nothing left to cut (or max_tokens alone is too large)
    return plan


def check_truncation(
    state: AppState, ex: Exchange, model: str, estimated: int, usage: dict[str, Any] | None
) -> None:
    """Compare the backend's prompt count with ours; warn (header, log) when it cut the prompt."""
    reported = prompt_tokens(usage)
    ratio = state.calibration.ratio(model) or 1.0
    if silent_truncation(round(estimated * ratio), reported):
        ex.fields["upstream_truncated"] = True
        ex.fields["upstream_prompt_tokens"] = reported
        ex.extra_headers.append(TRUNCATION_WARNING)
        if state.discovery is not None:
            state.discovery.forget(model)  # ask again: the loaded runner now states its window
        return
    calibrate(state, model, estimated, reported)


def calibrate(state: AppState, model: str, estimated: int, reported: int | None) -> None:
    """One calibration sample; a change of the ratio the planner applies is counted, since each
    one changes budgets, and so may move cuts (and cost prefix caches)."""
    before = state.calibration.ratio(model)
    state.calibration.record(model, estimated, reported)
    if state.calibration.ratio(model) != before:
        state.metrics.observe_calibration_change(model)
