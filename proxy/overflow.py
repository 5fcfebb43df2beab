"""Reading what a backend says about context overflow: rejections, and silent truncation.

Pure functions and small bounded objects; no I/O. Backends reject an oversized prompt in their
own words, and most of them state the true limit, which is worth more than any configured
guess. The wordings below are the real ones, as the backends write them:

- vLLM (serving_engine / renderers): "This model's maximum context length is N tokens. However,
  you requested T tokens (P in the messages, C in the completion)." / "... However, your request
  has P input tokens." / "... you requested C output tokens and your prompt contains [at least]
  P input tokens, for a total of [at least] T tokens." / "'max_tokens' ... is too large: C. This
  model's maximum context length is N tokens and your request has P input tokens (C > N - P)."
- OpenAI / Azure: the same opening, "However, your messages resulted in P tokens", code
  `context_length_exceeded` (newer: "Your input exceeds the context window of this model", or
  "Input tokens exceed the configured limit of N tokens. Your messages resulted in P tokens").
- OpenRouter: "This endpoint's maximum context length is N tokens. However, you requested about
  T tokens (P of text input, K of tool input, C in the output)."
- llama.cpp (tools/server/server-context.cpp): `{"error": {"code": 400, "message": "request (P
  tokens) exceeds the available context size (N tokens), try increasing it", "type":
  "exceed_context_size_error", "n_prompt_tokens": P, "n_ctx": N}}`; older builds say "the
  request exceeds the available context size, try increasing it". Ollama relays it wrapped in a
  JSON string.
- oMLX: "Prompt too long: P tokens exceeds max context window of N tokens".
- LM Studio: "Trying to keep the first P tokens when context the overflows. However, the model is
  loaded with context length of only N tokens, ..." / `{"error": "The number of tokens to keep
  from the initial prompt is greater than the context length (n_keep: P>= n_ctx: N). ..."}`
  (0.4.21+ sends it with status 200) / MLX engine: "Context size has been exceeded".
- Ollama: "the input length exceeds the context length" (no numbers). Its OpenAI route usually
  truncates silently instead, which only `usage.prompt_tokens` reveals: `silent_truncation`.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

MAX_BODY = 256 * 1024  # error bodies are small; never scan more than this
MAX_NUMBER = 100_000_000
# A number starts where no digit or comma comes before it, and its digit groups are read once
# (possessive): tried inside a long `1,111,111,...` run, it reread the rest from every digit.
_N = r"(?<![\d,])(\d{1,3}(?:,\d{3})++|\d++)"
_OWN = "shrink-proxy"  # our own ContextTooLarge message: never mistake it for the backend's


@dataclass(frozen=True)
class Overflow:
    limit: int | None  # the model's true context window, when the message says it
    prompt_tokens: int | None  # the backend's own count of the prompt (may be a lower bound)


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("N", _N), re.IGNORECASE)


# (pattern, group of the prompt count, group of the limit); 0 = not stated.
_RULES: list[tuple[re.Pattern[str], int, int]] = [
    (_rx(r"request \(N tokens\) exceeds the available context size \(N tokens\)"), 1, 2),
    (_rx(r"exceeds the available context size"), 0, 0),
    (_rx(r"prompt too long: N tokens exceeds max context window of N"), 1, 2),
    (
        _rx(
            r"trying to keep the first N tokens when context (?:the )?overflows\.?\s*However,"
            r" the model is loaded with (?:a )?context length of only N"
        ),
        1,
        2,
    ),
    (_rx(r"trying to keep the first N tokens when context (?:the )?overflows"), 1, 0),
    (_rx(r"n_keep: N\s*>=?\s*n_ctx: N"), 1, 2),
    (_rx(r"tokens to keep from the initial prompt is greater than the context length"), 0, 0),
    (_rx(r"input length N exceeds context length N"), 1, 2),
    (_rx(r"context size has been exceeded"), 0, 0),
    (_rx(r"the input length exceeds the context length"), 0, 0),
    (_rx(r"input tokens exceed the configured limit of N tokens"), 0, 1),
    (_rx(r"maximum context length is (?:only )?N"), 0, 1),
    (_rx(r"prompt is too long: N tokens > N maximum"), 1, 2),
    (_rx(r"input length and .?max_tokens.? exceed context limit: N \+ N > N"), 1, 3),
    (_rx(r"`inputs` tokens \+ `max_new_tokens` must be <= N\. Given: N `inputs` tokens"), 2, 1),
    (_rx(r"`inputs` must have less than N tokens\. Given: N"), 2, 1),
    (_rx(r"prompt has N tokens, max prompt/context tokens is N"), 1, 2),
    (_rx(r"exceeds the context window of this model"), 0, 0),
    (_rx(r"input is too large to process\. increase the physical batch size"), 0, 0),
    (_rx(r"input is larger than the max context size"), 0, 0),
]
# Where the OpenAI-style messages put the prompt count, after "maximum context length is N".
_PROMPT_RULES = [
    _rx(r"your messages resulted in N tokens"),
    _rx(r"your request has N input tokens"),
    _rx(r"your prompt contains (?:at least )?N input tokens"),
    _rx(r"\(N in (?:the |your )?(?:messages|prompt)"),
]
_OPENROUTER = _rx(r"you requested about N tokens \(([^()]*+)\)")  # to the first bracket
_OPENROUTER_PART = _rx(r"N of [a-z ]*?input")
_CODES = {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
_TEXT_KEYS = ("message", "error", "detail", "msg")


def _int(text: str | None) -> int | None:
    if not text:
        return None
    n = int(text.replace(",", ""))
    return n if 0 < n <= MAX_NUMBER else None


def _num(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_NUMBER else None


class _Reading:
    """Everything an error body says: its texts, codes and llama.cpp's numeric fields."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.codes: set[str] = set()
        self.n_ctx: int | None = None
        self.n_prompt: int | None = None

    def walk(self, node: Any, depth: int = 0) -> None:
        if depth > 6:
            return
        if isinstance(node, str):
            self.texts.append(node)
            stripped = node.strip()
            if stripped.startswith("{") and len(stripped) < MAX_BODY:  # Ollama's wrapping
                try:
                    self.walk(orjson.loads(stripped), depth + 1)
                except orjson.JSONDecodeError:
                    pass
            return
        if isinstance(node, list):
            for item in node[:8]:
                self.walk(item, depth + 1)
            return
        if not isinstance(node, dict):
            return
        for key in ("code", "type"):
            if isinstance(node.get(key), str):
                self.codes.add(node[key].lower())
        self.n_ctx = self.n_ctx or _num(node.get("n_ctx"))
        self.n_prompt = self.n_prompt or _num(node.get("n_prompt_tokens"))
        for key in _TEXT_KEYS:
            if key in node:
                self.walk(node[key], depth + 1)


def _error_of(status: int, body: bytes) -> _Reading | None:
    data = body[:MAX_BODY]
    reading = _Reading()
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if status == 200:
        # LM Studio 0.4.21+ answers an overflow with 200 and an error object; a 200 body is
        # read only when it is nothing but an error, never a completion's content.
        if not (isinstance(doc, dict) and "error" in doc and "choices" not in doc):
            return None
    elif not 400 <= status <= 599:
        return None
    if doc is None:
        reading.texts.append(data.decode("utf-8", "replace"))
    else:
        reading.walk(doc)
    return reading


def parse_overflow(status: int, body: bytes) -> Overflow | None:
    """What an upstream error says about context overflow; None when it is not one.

    Never raises: unknown JSON shapes, HTML error pages and binary junk give None.
    """
    try:
        reading = _error_of(status, body)
    except Exception:  # a pathological body must not fail the request
        return None
    if reading is None:
        return None
    text = "\n".join(reading.texts)
    if _OWN in text:
        return None
    for pattern, prompt_group, limit_group in _RULES:
        m = pattern.search(text)
        if m is None:
            continue
        limit = _int(m.group(limit_group)) if limit_group else None
        prompt = _int(m.group(prompt_group)) if prompt_group else None
        if prompt is None:
            prompt = _openai_prompt(text)
        return Overflow(limit or reading.n_ctx, prompt or reading.n_prompt)
    if reading.codes & _CODES:
        return Overflow(reading.n_ctx, reading.n_prompt or _openai_prompt(text))
    return None


def _openai_prompt(text: str) -> int | None:
    m = _OPENROUTER.search(text)
    if m is not None:
        parts = [_int(p) for p in _OPENROUTER_PART.findall(m.group(2))]
        total = sum(p for p in parts if p)
        return total or None
    for pattern in _PROMPT_RULES:
        m = pattern.search(text)
        if m is not None:
            return _int(m.group(1))
    return None


def retry_window(overflow: Overflow, estimated_sent: int) -> int | None:
    """The window, in our own token units, to shrink to for the one retry; None: do not retry.

    When the backend counted more tokens than we estimated for the same prompt, its limit is
    scaled down by that ratio, or the retry would overflow again.
    """
    if overflow.limit is None:
        return None
    sent = overflow.prompt_tokens
    if sent and estimated_sent > 0 and sent > estimated_sent:
        return max(1, overflow.limit * estimated_sent // sent)
    return overflow.limit


def silent_truncation(
    estimated_prompt_tokens: int,
    reported_prompt_tokens: int | None,
    *,
    threshold: float = 0.6,
    min_estimate: int = 1024,
) -> bool:
    """True when the backend counted far fewer prompt tokens than we sent.

    That is how Ollama's silent truncation shows (it answers 200 from the tail of the prompt). A
    missing or zero count says nothing: Ollama omits it, or reports 0, for a cached prompt.
    """
    if not reported_prompt_tokens or reported_prompt_tokens < 0:
        return False
    if estimated_prompt_tokens <= min_estimate:
        return False
    return reported_prompt_tokens < threshold * estimated_prompt_tokens


# (running average, samples, applied ratio or None before enough samples)
CalibrationState = tuple[float, int, float | None]


class Calibration:
    """Per-model ratio of the backend's prompt count to our estimate (EWMA, bounded LRU).

    Our counter is tiktoken; the model's tokenizer is not. The ratio says by how much to scale
    our estimate (or the window) so a budget computed in our units fits the backend's.

    What plans use is not the running average but an *applied* ratio that moves rarely and in
    steps: every sample moves the average a little, and a budget that followed it would move
    the cut of a long conversation back and forth turn after turn (on llama.cpp's server a
    budget drifting 3,943 -> 2,716 moved the cut 46 -> 44 -> 46, each move a full re-read). The
    applied ratio is the average rounded up to a multiple of `step` (up: a budget too small
    costs some history, one too large an overflow); it follows the average up as soon as the
    average passes it, and down only once the average is `fall` steps below it.
    Thread-safe: plans run in worker threads while responses are read on the event loop.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.2,
        max_models: int = 256,
        min_estimate: int = 256,
        min_samples: int = 3,
        bounds: tuple[float, float] = (0.5, 2.0),
        step: float = 1 / 16,
        fall: float = 2.0,
    ):
        self.alpha = alpha
        self.max_models = max_models
        self.min_estimate = min_estimate
        self.min_samples = min_samples
        self.bounds = bounds
        self.step = step
        self.fall = fall
        # model -> (running average, samples, applied ratio or None before min_samples)
        self._ratios: OrderedDict[str, CalibrationState] = OrderedDict()
        self._lock = threading.Lock()
        # Told of every recorded change (proxy.shared_learning publishes it to other replicas).
        self.on_record: Callable[[str, CalibrationState], None] | None = None

    def _quantized(self, ratio: float) -> float:
        # A hair below a multiple stays on it (float noise must not add a step).
        return round(math.ceil(ratio / self.step - 1e-9) * self.step, 6)

    def _applied(self, ratio: float, n: int, applied: float | None) -> float | None:
        if n < self.min_samples:
            return None
        if applied is None or ratio > applied or ratio < applied - self.fall * self.step:
            return self._quantized(ratio)
        return applied

    def record(self, model: str, estimated: int, reported: int | None) -> None:
        """One observation. Small prompts (fixed overhead dominates) and outliers outside the
        bounds (truncation, a cached prompt's partial count) are ignored."""
        if not reported or reported <= 0 or estimated < self.min_estimate:
            return
        sample = reported / estimated
        low, high = self.bounds
        if not low <= sample <= high:
            return
        with self._lock:
            ratio, n, applied = self._ratios.pop(model, (sample, 0, None))
            ratio = sample if n == 0 else ratio + self.alpha * (sample - ratio)
            state = self._ratios[model] = (ratio, n + 1, self._applied(ratio, n + 1, applied))
            self._bound()
        if self.on_record is not None:
            self.on_record(model, state)

    def adopt(self, model: str, state: CalibrationState) -> None:
        """What another replica learnt for `model`: taken when it rests on more samples than
        this process's own (so replicas converge on the best-informed average)."""
        ratio, n, applied = state
        low, high = self.bounds
        if not low <= ratio <= high or (applied is not None and not low <= applied <= high):
            return
        with self._lock:
            current = self._ratios.get(model)
            if current is not None and current[1] >= n:
                return
            self._ratios[model] = (ratio, n, applied if n >= self.min_samples else None)
            self._ratios.move_to_end(model)
            self._bound()

    def _bound(self) -> None:
        while len(self._ratios) > self.max_models:
            self._ratios.popitem(last=False)

    def ratio(self, model: str) -> float | None:
        """The applied reported/estimated ratio for `model`, once there are enough samples."""
        with self._lock:
            found = self._ratios.get(model)
        return None if found is None else found[2]

    def average(self, model: str) -> float | None:
        """The running average behind `ratio` (what the last samples say), for reports."""
        with self._lock:
            found = self._ratios.get(model)
        return None if found is None or found[1] < self.min_samples else found[0]

    def adjust_window(self, model: str, window: int) -> int:
        """`window` in our token units: smaller when the backend counts more than we do (never
        larger, so a wrong ratio can only cost some history, never an overflow)."""
        r = self.ratio(model)
        return int(window / r) if r and r > 1.0 else window

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {m: a for m, (_, _, a) in self._ratios.items() if a is not None}
