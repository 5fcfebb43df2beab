"""Overflow parsing: every backend's exact wording, junk, silent truncation and calibration."""

from __future__ import annotations

import orjson
import pytest

from proxy.errors import ContextTooLarge
from proxy.overflow import (
    Calibration,
    Overflow,
    parse_overflow,
    retry_window,
    silent_truncation,
)
from tests.fakes.backends import OVERFLOW_BODIES, FakeBackend
from tests.fakes.server import serve


def error(message: str, **fields: object) -> bytes:
    return orjson.dumps({"error": {"message": message, **fields}})


def vllm(message: str) -> bytes:
    """vLLM >= 0.10: ErrorResponse{error: ErrorInfo}."""
    return error(message, type="BadRequestError", param=None, code=400)


def openai(message: str) -> bytes:
    return error(
        message, type="invalid_request_error", param="messages", code="context_length_exceeded"
    )


CTX = "This model's maximum context length is"
# (id, status, body, expected). The wordings are the backends' own, as found in their sources and
# issue trackers (see proxy/overflow.py).
CASES: list[tuple[str, int, bytes, Overflow | None]] = [
    (
        "vllm-legacy-requested",
        400,
        orjson.dumps(
            {
                "object": "error",
                "message": f"{CTX} 8192 tokens. However, you requested 9000 tokens (8000 in the "
                "messages, 1000 in the completion). Please reduce the length of the messages or "
                "completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ),
        Overflow(8192, 8000),
    ),
    (
        "vllm-requested-no-breakdown",
        400,
        vllm(f"{CTX} 8192 tokens. However, you requested 9000 tokens. Please reduce the length."),
        Overflow(8192, None),
    ),
    (
        "vllm-request-has-input-tokens",
        400,
        vllm(
            f"{CTX} 2048 tokens. However, your request has 3000 input tokens. Please reduce the "
            "length of the input messages."
        ),
        Overflow(2048, 3000),
    ),
    (
        "vllm-output-and-prompt-at-least",
        400,
        vllm(
            f"{CTX} 8192 tokens. However, you requested 4096 output tokens and your prompt "
            "contains at least 4097 input tokens, for a total of at least 8193 tokens. Please "
            "reduce the length of the input prompt or the number of requested output tokens."
        ),
        Overflow(8192, 4097),
    ),
    (
        "vllm-prompt-contains-exact",
        400,
        vllm(
            f"{CTX} 8192 tokens. However, you requested 64 output tokens and your prompt "
            "contains 10000 input tokens, for a total of 10064 tokens. Please reduce the length "
            "of the input prompt or the number of requested output tokens."
        ),
        Overflow(8192, 10000),
    ),
    (
        "vllm-max-tokens-too-large",
        400,
        vllm(
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum "
            "context length is 4096 tokens and your request has 2104 input tokens (2000 > 4096 "
            "- 2104)."
        ),
        Overflow(4096, 2104),
    ),
    (
        "llamacpp",
        400,
        b'{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context '
        b'size (8192 tokens), try increasing it","type":"exceed_context_size_error",'
        b'"n_prompt_tokens":9412,"n_ctx":8192}}',
        Overflow(8192, 9412),
    ),
    (
        "llamacpp-older-wording-fields-only",
        400,
        b'{"error":{"code":400,"message":"the request exceeds the available context size, try '
        b'increasing it","type":"exceed_context_size_error","n_prompt_tokens":3000,"n_ctx":2048}}',
        Overflow(2048, 3000),
    ),
    (
        "llamacpp-older-wording-no-numbers",
        400,
        b'{"error":{"code":400,"message":"the request exceeds the available context size, try '
        b'increasing it","type":"invalid_request_error"}}',
        Overflow(None, None),
    ),
    (
        "llamacpp-physical-batch",
        500,
        b'{"error":{"code":500,"message":"input is too large to process. increase the physical '
        b'batch size","type":"server_error"}}',
        Overflow(None, None),
    ),
    (
        "ollama-relaying-llamacpp",
        400,
        b'{"error":"{\\"error\\":{\\"code\\":400,\\"message\\":\\"request (9177 tokens) exceeds '
        b'the available context size (4096 tokens), try increasing it\\",\\"type\\":\\"'
        b'exceed_context_size_error\\"}}"}',
        Overflow(4096, 9177),
    ),
    (
        "ollama-input-length",
        400,
        b'{"error":{"message":"the input length exceeds the context length","type":'
        b'"invalid_request_error","param":null,"code":null}}',
        Overflow(None, None),
    ),
    (
        "omlx",
        400,
        error(
            "Prompt too long: 40000 tokens exceeds max context window of 32768 tokens",
            type="invalid_request_error",
            param=None,
            code=None,
        ),
        Overflow(32768, 40000),
    ),
    (
        "omlx-fastapi-detail",
        400,
        b'{"detail":"Prompt too long: 51587 tokens exceeds max context window of 32768 tokens"}',
        Overflow(32768, 51587),
    ),
    (
        "openai",
        400,
        openai(
            f"{CTX} 128000 tokens. However, your messages resulted in 130000 tokens. Please "
            "reduce the length of the messages."
        ),
        Overflow(128000, 130000),
    ),
    (
        "openai-functions",
        400,
        openai(
            f"{CTX} 8192 tokens. However, your messages resulted in 8500 tokens (8000 in the "
            "messages, 500 in the functions). Please reduce the length of the messages or "
            "functions."
        ),
        Overflow(8192, 8500),
    ),
    (
        "openai-no-numbers",
        400,
        openai("Your input exceeds the context window of this model. Please adjust your input."),
        Overflow(None, None),
    ),
    (
        "openai-code-only",
        400,
        openai("Request too large."),
        Overflow(None, None),
    ),
    (
        "openai-configured-input-limit",
        400,
        openai(
            "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted "
            "in 300000 tokens. Please reduce the length of the messages."
        ),
        Overflow(272000, 300000),
    ),
    (
        "openrouter",
        400,
        error(
            "This endpoint's maximum context length is 8192 tokens. However, you requested "
            "about 12000 tokens (10000 of text input, 2000 in the output). Please reduce the "
            'length of either one, or use the "middle-out" transform to compress your prompt '
            "automatically.",
            code=400,
        ),
        Overflow(8192, 10000),
    ),
    (
        "openrouter-tool-input",
        400,
        error(
            "This endpoint's maximum context length is 1048576 tokens. However, you requested "
            "about 1293741 tokens (1227853 of text input, 353 of tool input, 65535 in the "
            "output). Please reduce the length of either one.",
            code=400,
        ),
        Overflow(1048576, 1228206),
    ),
    (
        "lmstudio-keep-first",
        400,
        b'{"error":"Trying to keep the first 111490 tokens when context the overflows. However, '
        b"the model is loaded with context length of only 32768 tokens, which is not enough. "
        b"Try to load the model with a larger context length, or provide a shorter input. Error "
        b'Data: n/a, Additional Data: n/a"}',
        Overflow(32768, 111490),
    ),
    (
        "lmstudio-keep-first-variant",
        400,
        error(
            "Trying to keep the first 6547 tokens when context overflows. However, the model is "
            "loaded with a context length of only 4096 tokens, which is not enough."
        ),
        Overflow(4096, 6547),
    ),
    (
        "lmstudio-n-keep",
        400,
        b'{"error":"The number of tokens to keep from the initial prompt is greater than the '
        b"context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger "
        b'context length, or provide a shorter input."}',
        Overflow(4096, 13055),
    ),
    (
        "lmstudio-n-keep-no-numbers",
        400,
        b'{"error":"<LM Studio error> The number of tokens to keep from the initial prompt is '
        b'greater than the context length"}',
        Overflow(None, None),
    ),
    (
        "lmstudio-status-200",
        200,
        b'{"error":"The number of tokens to keep from the initial prompt is greater than the '
        b'context length (n_keep: 9000>= n_ctx: 8192)."}',
        Overflow(8192, 9000),
    ),
    (
        "lmstudio-old",
        400,
        b'{"error":"Error: Input length 6491 exceeds context length 1500"}',
        Overflow(1500, 6491),
    ),
    (
        "lmstudio-mlx",
        400,
        b'{"error":{"message":"Context size has been exceeded.","type":"invalid_request_error"}}',
        Overflow(None, None),
    ),
    (
        "tgi",
        422,
        b'{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. '
        b'Given: 4000 `inputs` tokens and 500 `max_new_tokens`","error_type":"validation"}',
        Overflow(4096, 4000),
    ),
    (
        "litellm-wrapped-vllm",
        400,
        error(
            "litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - "
            f"{{'error': {{'message': \"{CTX} 32768 tokens. However, your request has 59360 "
            'input tokens. Please reduce the length of the input messages."}}',
            code="400",
        ),
        Overflow(32768, 59360),
    ),
    (
        "plain-text-body",
        400,
        b"Prompt too long: 5000 tokens exceeds max context window of 4096",
        Overflow(4096, 5000),
    ),
    ("comma-numbers", 400, vllm(f"{CTX} 128,000 tokens."), Overflow(128000, None)),
]

JUNK: list[tuple[str, int, bytes]] = [
    ("empty", 400, b""),
    ("not-json", 400, b"Bad Request"),
    ("binary", 500, bytes(range(256)) * 4),
    ("html", 502, b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
    ("null", 400, b"null"),
    ("list", 400, b"[1, 2, 3]"),
    ("number", 400, b"42"),
    ("error-null", 400, b'{"error": null}'),
    ("message-not-text", 400, b'{"error": {"message": 5, "code": {"a": 1}}}'),
    ("deep", 400, b'{"error":' * 200 + b"1" + b"}" * 200),
    ("truncated-json", 400, b'{"error": {"message": "This model\'s maximum context'),
    (
        "rate-limit",
        429,
        error("Rate limit reached for requests", type="requests", code="rate_limit_exceeded"),
    ),
    (
        "auth",
        401,
        error("Incorrect API key provided", type="invalid_request_error", code="invalid_api_key"),
    ),
    (
        "max-tokens-over-model-len",
        400,
        error("max_tokens=9000 cannot be greater than max_model_len=8192"),
    ),
    ("other-400", 400, error("Bad tool schema", type="invalid_request_error")),
    (
        "success-200",
        200,
        orjson.dumps(
            {
                "choices": [
                    {"message": {"content": "This model's maximum context length is 8192 tokens."}}
                ]
            }
        ),
    ),
    ("redirect", 302, error("This model's maximum context length is 8192 tokens.")),
    ("nested-string-junk", 400, b'{"error":"{not json"}'),
]


@pytest.mark.parametrize(
    ("status", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_overflow_wordings(status: int, body: bytes, expected: Overflow) -> None:
    assert parse_overflow(status, body) == expected


@pytest.mark.parametrize(("status", "body"), [j[1:] for j in JUNK], ids=[j[0] for j in JUNK])
def test_junk_is_not_an_overflow(status: int, body: bytes) -> None:
    assert parse_overflow(status, body) is None


def test_never_our_own_message() -> None:
    exc = ContextTooLarge(
        "This request needs 40,000 prompt tokens even after shrink-proxy dropped old history "
        "and cut the largest texts of the newest turn, but model 'm' has a prompt budget of "
        "27,000 tokens (window 32,768 minus the completion reserve and a safety margin)."
    )
    assert parse_overflow(exc.status, orjson.dumps(exc.body())) is None
    assert parse_overflow(exc.status, orjson.dumps(exc.anthropic_body())) is None


def anthropic_error(message: str, type_: str = "invalid_request_error") -> bytes:
    """Anthropic's envelope: `{"type": "error", "error": {"type", "message"}}`."""
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


# On the Messages API (/v1/messages): Anthropic's own two wordings, and the backends that answer
# there in Anthropic's envelope. llama.cpp answers that route with its chat body (the
# `llama-*` CASES above), as tests/e2e/test_llamacpp_messages.py shows.
ANTHROPIC_CASES: list[tuple[str, int, bytes, Overflow | None]] = [
    (
        "anthropic-prompt-too-long",
        400,
        anthropic_error("prompt is too long: 208310 tokens > 200000 maximum"),
        Overflow(limit=200000, prompt_tokens=208310),
    ),
    (
        "anthropic-with-max-tokens",
        400,
        anthropic_error(
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again"
        ),
        Overflow(limit=200000, prompt_tokens=188240),
    ),
    (
        "vllm-in-anthropic-envelope",
        400,
        anthropic_error(
            "This model's maximum context length is 32768 tokens. However, your request has "
            "40100 input tokens. Please reduce the length of the input messages."
        ),
        Overflow(limit=32768, prompt_tokens=40100),
    ),
    (
        "ollama-in-anthropic-envelope",
        400,
        anthropic_error("the input length exceeds the context length", "api_error"),
        Overflow(limit=None, prompt_tokens=None),
    ),
]


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [c[1:] for c in ANTHROPIC_CASES],
    ids=[c[0] for c in ANTHROPIC_CASES],
)
def test_overflow_wordings_in_anthropic_s_envelope(
    status: int, body: bytes, expected: Overflow
) -> None:
    assert parse_overflow(status, body) == expected


def test_other_anthropic_errors_are_not_overflows() -> None:
    for kind in ("invalid_request_error", "overloaded_error", "rate_limit_error"):
        assert (
            parse_overflow(400, anthropic_error("messages.1: roles must alternate", kind)) is None
        )


@pytest.mark.parametrize("flavour", sorted(OVERFLOW_BODIES))
def test_fake_backends_overflow_bodies_over_http(flavour: str) -> None:
    """The fakes' bodies, as they arrive over a real socket, parse to the fake's window."""
    import httpx

    fake = FakeBackend(flavour, window=4096)
    with serve(fake.app()) as url:
        r = httpx.post(
            url + fake.prefix + "/chat/completions",
            json={"model": fake.model, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-fake-prompt-tokens": "5000"},
        )
    assert r.status_code == 400
    assert parse_overflow(r.status_code, r.content) == Overflow(4096, 5000)


def test_ollama_fake_truncates_silently_over_http() -> None:
    import httpx

    fake = FakeBackend("ollama", window=2048)
    with serve(fake.app()) as url:
        r = httpx.post(
            url + "/v1/chat/completions",
            json={"model": fake.model, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-fake-prompt-tokens": "9000"},
        )
    assert r.status_code == 200 and parse_overflow(200, r.content) is None
    assert silent_truncation(9000, r.json()["usage"]["prompt_tokens"])


@pytest.mark.parametrize(
    ("overflow", "sent", "expected"),
    [
        (Overflow(8192, 10000), 10000, 8192),  # our count matched: shrink to the limit
        (Overflow(8192, 10000), 8000, 6553),  # backend counts 25% more: scale the limit down
        (Overflow(8192, 9000), 12000, 8192),  # we over-count: never scale the limit up
        (Overflow(8192, None), 12000, 8192),
        (Overflow(None, 9000), 12000, None),  # unknown limit: no retry
        (Overflow(None, None), 12000, None),
    ],
)
def test_retry_window(overflow: Overflow, sent: int, expected: int | None) -> None:
    assert retry_window(overflow, sent) == expected


@pytest.mark.parametrize(
    ("estimated", "reported", "truncated"),
    [
        (10000, 2048, True),  # Ollama cut it to num_ctx
        (10000, 5999, True),
        (10000, 6000, False),  # the threshold itself is not truncation
        (10000, 9500, False),
        (10000, 12000, False),  # backend counts more: that is calibration, not truncation
        (1000, 100, False),  # small prompts: template overhead dominates, say nothing
        (1024, 100, False),
        (10000, None, False),  # no usage reported
        (10000, 0, False),  # Ollama reports 0 for a fully cached prompt
        (10000, -5, False),
    ],
)
def test_silent_truncation(estimated: int, reported: int | None, truncated: bool) -> None:
    assert silent_truncation(estimated, reported) is truncated


def test_silent_truncation_thresholds_are_arguments() -> None:
    assert silent_truncation(600, 100, min_estimate=500)
    assert not silent_truncation(10000, 7000, threshold=0.6)
    assert silent_truncation(10000, 7000, threshold=0.8)


def test_calibration_ewma_needs_enough_samples() -> None:
    cal = Calibration(alpha=0.5, min_samples=3)
    cal.record("m", 1000, 1200)
    cal.record("m", 1000, 1200)
    assert cal.ratio("m") is None
    cal.record("m", 1000, 1400)
    assert cal.average("m") == pytest.approx(1.3)
    assert cal.ratio("m") == 1.3125  # rounded up to a sixteenth
    assert cal.snapshot() == {"m": 1.3125}
    assert cal.adjust_window("m", 13125) == 10000
    assert cal.ratio("other") is None and cal.adjust_window("other", 8192) == 8192


def test_calibration_ignores_small_prompts_outliers_and_missing_counts() -> None:
    cal = Calibration(min_samples=1, min_estimate=256, bounds=(0.5, 2.0))
    cal.record("m", 100, 150)  # too small to say anything
    cal.record("m", 10000, 2048)  # truncation, not a tokenizer difference
    cal.record("m", 10000, 30000)  # nonsense
    cal.record("m", 10000, None)
    cal.record("m", 10000, 0)
    assert cal.ratio("m") is None
    cal.record("m", 10000, 9000)
    assert cal.ratio("m") == 0.9375
    assert cal.adjust_window("m", 8192) == 8192  # never enlarges the window


def test_calibration_moves_rarely_and_in_steps() -> None:
    """Noise around a ratio leaves the applied ratio (and so the budget) where it is; it follows
    the average up at once and down only past a margin, so budgets do not drift turn by turn."""
    cal = Calibration(alpha=0.2, min_samples=3)
    applied: list[float | None] = []

    def sample(reported: int) -> None:
        cal.record("m", 1000, reported)
        if cal.ratio("m") is not None and (not applied or applied[-1] != cal.ratio("m")):
            applied.append(cal.ratio("m"))

    for _ in range(3):
        sample(1450)
    assert applied == [1.5]
    windows = set()
    for i in range(200):  # +-4% of noise around 1.45: the window never moves
        sample(1450 + (58 if i % 3 == 0 else -29 * (i % 2)))
        windows.add(cal.adjust_window("m", 4096))
    assert windows == {2730} and applied == [1.5]
    for _ in range(30):  # the tokenizer really counts more: up as the average climbs
        sample(1600)
    assert applied == [1.5, 1.5625, 1.625]
    for _ in range(40):  # and a little less: stays (never flaps back and forth)
        sample(1530)
    assert applied == [1.5, 1.5625, 1.625]
    for _ in range(40):  # much less: down, once the average is two steps below
        sample(1200)
    assert applied[-1] == 1.25 and all(
        a > b for a, b in zip(applied[2:], applied[3:], strict=False)
    )


def test_calibration_is_bounded() -> None:
    cal = Calibration(max_models=3, min_samples=1)
    for i in range(10):
        cal.record(f"m{i}", 1000, 1100)
    assert sorted(cal.snapshot()) == ["m7", "m8", "m9"]
    cal.record("m7", 1000, 1100)  # touched: now the most recent
    cal.record("m10", 1000, 1100)
    assert sorted(cal.snapshot()) == ["m10", "m7", "m9"]
