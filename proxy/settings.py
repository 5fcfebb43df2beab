"""Settings: the one place that reads the environment.

`cli.py` builds one frozen `Settings` (env `SHRINK_*`, an optional env file, then CLI flags on
top) and every component receives the values it needs. Each field's description feeds the README
table (`shrink-proxy settings-table`), so the documentation cannot drift from the code.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proxy.settings_mcp import McpSettings
from proxy.settings_store import StoreSettings

MIN_WINDOW = 512
MAX_WINDOW = 10_000_000


class Settings(BaseSettings, McpSettings, StoreSettings):
    model_config = SettingsConfigDict(
        env_prefix="SHRINK_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
    )

    # --- network -------------------------------------------------------------------------------
    upstream_url: str = Field(
        "http://127.0.0.1:11434/v1",
        description="Base URL of the real backend, including `/v1`, exactly like an OpenAI "
        "client's `base_url` (default: Ollama on this machine).",
    )
    upstream_api_key: SecretStr | None = Field(
        None,
        description="Key sent upstream as `Authorization: Bearer …` (and `api-key` for Azure "
        "paths) instead of the client's, so clients can hold a dummy key. Unset: the client's "
        "own `Authorization`/`api-key` is passed through.",
    )
    proxy_api_key: SecretStr | None = Field(
        None,
        description="Inbound key: when set, clients must present it (`Authorization: Bearer …` "
        "or `api-key`), and the upstream then receives `SHRINK_UPSTREAM_API_KEY`, never the "
        "client's key. Also guards /metrics, /stats and /dashboard.",
    )
    host: str = Field("127.0.0.1", description="Interface to bind. `0.0.0.0` exposes the proxy.")
    port: int = Field(8080, ge=0, le=65535, description="Port to listen on.")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Worker processes. Caches, metrics and discovered windows are per worker.",
    )
    shutdown_grace: float = Field(
        30.0,
        ge=0,
        description="Seconds in-flight requests may take to finish after SIGTERM.",
    )

    # --- timeouts and limits -------------------------------------------------------------------
    connect_timeout: float = Field(
        10.0, gt=0, description="Seconds to establish a connection to the upstream."
    )
    first_byte_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds to wait for the upstream's response headers. A non-streamed "
        "generation may legitimately take minutes.",
    )
    idle_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds allowed between two chunks of an upstream response body.",
    )
    write_timeout: float = Field(60.0, gt=0, description="Seconds to send the request upstream.")
    max_body_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Largest request body accepted; larger ones get 413.",
    )
    heap_trim_interval: float = Field(
        1.0,
        ge=0,
        description="Seconds between returns of freed heap memory to the OS (glibc "
        "`malloc_trim`), done only after a request body of 64 KB or more; keeps RSS from "
        "creeping up under rounds of large requests. 0 turns it off.",
    )
    max_connections: int = Field(
        1024,
        ge=1,
        description="Upper bound on concurrent upstream connections (so on concurrent streams, "
        "with window discovery and summaries sharing the pool).",
    )

    upstream_transport: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="Connection layer under the httpx client: `aiohttp` (faster under "
        "concurrency, see the README's performance section) or httpx's own.",
    )

    # --- shrinking -----------------------------------------------------------------------------
    mode: Literal["auto", "off", "tools", "trim", "compact"] = Field(
        "auto",
        description="Default shrink mode: `trim` (compact tool results, drop old history to "
        "fit), `compact` (the same, but the dropped history is replaced by a summary), `tools` "
        "(compact tool results only), `off` (pure pass-through); `auto` is `compact` when "
        "`SHRINK_SUMMARY_URL` is set, else `trim`. Clients override it per request with the "
        "`x-shrink-mode` header.",
    )
    context_window: int = Field(
        32768,
        description=f"Context window (tokens) assumed for models without an override. "
        f"Clamped to [{MIN_WINDOW}, {MAX_WINDOW}].",
    )
    model_windows: dict[str, int] = Field(
        default_factory=dict,
        description='Per-model windows as JSON, e.g. `{"qwen2.5-coder": 32768}`. A key matches '
        "the model name exactly, else as its longest prefix.",
    )
    discover_window: bool = Field(
        True,
        description="Ask the backend for each model's served context window (vLLM and "
        "OpenRouter `/v1/models`, llama.cpp `/props`, Ollama `/api/ps`, LM Studio "
        "`/api/v0/models`) and use it instead of `SHRINK_CONTEXT_WINDOW`; a smaller "
        "`SHRINK_MODEL_WINDOWS` entry still wins.",
    )
    discovery_ttl: float = Field(
        300.0,
        gt=0,
        description="Seconds a discovered window, or one learnt from an overflow error, is "
        "trusted before the backend is asked again (failures are cached as long).",
    )
    discovery_timeout: float = Field(
        2.0, gt=0, description="Seconds each window-discovery request may take."
    )
    overflow_retry: bool = Field(
        True,
        description="When the backend rejects a prompt as too long and states its limit, "
        "shrink to that limit and retry once, before anything reaches the client (the answer "
        "then carries `x-shrink-retried: overflow`).",
    )
    tokenizer: str | None = Field(
        None,
        description="Force one tiktoken encoding (`cl100k_base`, `o200k_base`) for every model. "
        "Default: chosen by model family.",
    )
    tiktoken_cache_dir: str = Field(
        default_factory=lambda: _tiktoken_cache_dir(os.environ),
        validation_alias="TIKTOKEN_CACHE_DIR",
        description="(env `TIKTOKEN_CACHE_DIR`, no prefix) Folder holding tiktoken's encoding "
        "files for air-gapped machines (default: tiktoken's own, `<tmp>/data-gym-cache`). "
        "Without the files, counts fall back to a labelled bytes/4 estimate with a larger "
        "safety margin; nothing is ever downloaded at request time.",
    )
    token_cache_size: int = Field(
        20_000,
        ge=0,
        description="Token counts remembered per worker (messages and long texts, by content "
        "digest), so a resent turn counts only its new messages. A long agent conversation takes "
        "about 1.5 entries per message; an entry costs ~150 bytes.",
    )
    memo_mb: float = Field(
        4.0,
        ge=0,
        description="Characters (in millions) of compacted tool results and facts lists "
        "remembered per worker, so a resent turn reuses them; also at most 4,096 entries.",
    )
    plan_processes: int = Field(
        1,
        ge=0,
        le=64,
        description="Worker processes that parse and plan requests of "
        "`SHRINK_PROCESS_MIN_BYTES` or more, so that parsing a huge body (orjson holds the GIL "
        "for ~200 ms per 60 MB) never stalls other requests. Started on first use; 0 plans "
        "everything in this process.",
    )
    process_min_bytes: int = Field(
        1024 * 1024,
        ge=0,
        description="Request bodies at least this large are planned in a worker process "
        "(`SHRINK_PLAN_PROCESSES`).",
    )
    max_queued_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description="Bytes of request bodies that may wait for or be in planning at once (in "
        "threads and processes); a request past it gets 503 `overloaded` with `Retry-After`.",
    )
    work_budget: float = Field(
        0.5,
        ge=0,
        description="Seconds stage 1 may spend reading one tool result, plus "
        "`SHRINK_WORK_BUDGET_PER_MB` per MB of it. Defence in depth (every rule runs in linear "
        "time): a result that takes longer is cut head+tail instead, the request goes on, and "
        "`work_budget` shows in `x-shrink-actions`, the log and /metrics.",
    )
    work_budget_per_mb: float = Field(
        2.0,
        ge=0,
        description="Seconds of `SHRINK_WORK_BUDGET` added per MB of the tool result read.",
    )
    completion_reserve: int = Field(
        4096,
        ge=0,
        description="Tokens kept free for the answer when the request has no "
        "`max_completion_tokens`/`max_tokens` (capped at a quarter of the window).",
    )
    min_prompt_budget: int = Field(
        1024,
        ge=64,
        description="Floor for the prompt budget when the request's own completion reserve "
        "would leave less (the reserve is clamped and the report says so).",
    )
    safety_margin: float = Field(
        0.03, ge=0, le=0.5, description="Share of the window kept free for counting error."
    )
    estimate_safety_margin: float = Field(
        0.15,
        ge=0,
        le=0.5,
        description="Share of the window kept free when counting falls back to the estimate.",
    )
    tool_max_tokens: int = Field(
        1024,
        ge=64,
        description="Tool results above this many tokens (or the window divided by "
        "`SHRINK_TOOL_WINDOW_SHARE`, if smaller) are compacted to fit it (content-aware: logs, "
        "JSON, text).",
    )
    tool_window_share: int = Field(
        20,
        ge=1,
        le=1000,
        description="A tool result may also take at most the window divided by this. Smaller "
        "keeps more of each result on small windows and moves the trim cut more often "
        "(prompt-cache misses): at 8k, 8 with `SHRINK_FACTS_WINDOW_SHARE=20` kept every "
        "critical line of the dev corpus and missed the cache on 4.3% of turns, against 36/39 "
        "and 1.6% by default.",
    )
    keep_last: int = Field(
        4,
        ge=0,
        le=1000,
        description="The last N messages are kept: when they alone do not fit, their largest "
        "texts are cut head+tail first (not the latest user message); only if that cannot fit "
        "are the oldest of them dropped.",
    )
    cut_latest_user: bool = Field(
        True,
        description="When the latest user message alone does not fit the budget (a whole log "
        "piped into one prompt), cut its middle, with the same marker as every cut, and say so "
        "in `x-shrink-warning: latest-user-cut`. `false`: such a request gets `400 "
        "context_length_exceeded` instead.",
    )
    trim_step: float = Field(
        0.8,
        gt=0,
        le=1,
        description="When trimmed history must be cut again, the cut leaves this share of the "
        "budget free for the turns to come: larger means rarer, deeper cuts and fewer "
        "prompt-cache misses.",
    )
    trim_keep_tokens: int = Field(
        1024,
        ge=0,
        description="...but a cut that moves keeps at least this many tokens of the request (at "
        "most half the budget): on small windows the share alone kept little beyond the system "
        "prompt (at 4k a fifth of it: ~560 tokens). With the defaults it binds only where the room "
        "is under 5,120 tokens: below 8k, or at 8k with about 800 tokens of tool definitions.",
    )
    facts_tokens: int = Field(
        400,
        ge=0,
        description="When history is trimmed, the marker lists the dropped messages' key lines "
        "verbatim (errors, test outcomes, commands, paths, versions) in up to this many tokens "
        "(at most the window divided by `SHRINK_FACTS_WINDOW_SHARE`). 0 turns the list off.",
    )
    facts_window_share: int = Field(
        80,
        ge=1,
        le=10000,
        description="The key lines listed under the trim marker take at most the window divided "
        "by this (see `SHRINK_TOOL_WINDOW_SHARE` for the trade).",
    )
    facts_min_tokens: int = Field(
        100,
        ge=0,
        description="...but at least this many tokens (at most `SHRINK_FACTS_TOKENS`): a share "
        "of a 4k window is 51 tokens, a line or two. Binds only below 8k with the defaults.",
    )
    stream_usage: bool = Field(
        True,
        description="Ask streaming upstreams for `stream_options.include_usage` to learn the "
        "true prompt size (and detect silent truncation); the extra usage chunk is removed "
        "before it reaches a client that did not ask for it. Not done on Azure paths.",
    )
    billing_header: Literal["auto", "keep", "strip"] = Field(
        "auto",
        description="The value of Claude Code's `x-anthropic-billing-header` line that opens "
        "`system` (`cc_version=...; cch=...;`): it changes every turn, so no prefix cache "
        "matches past it. "
        "`strip` removes the value on /v1/messages, `keep` forwards it, `auto` strips it unless "
        "the upstream is Anthropic's own API (api.anthropic.com), which bills by it.",
    )
    marker_role: Literal["system", "user"] = Field(
        "system",
        description="Role of the message that says how much history was omitted.",
    )

    # --- summaries (compact mode) --------------------------------------------------------------
    summary_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL (with /v1) of the summarizer. Unset: the "
        "upstream itself. Setting it makes `auto` mode summarize.",
    )
    summary_model: str | None = Field(
        None, description="Model that writes summaries. Unset: the request's own model."
    )
    summary_api_key: SecretStr | None = Field(
        None,
        description="Key for the summarizer. Unset: the upstream key (or, with no summary URL, "
        "the client's own Authorization).",
    )
    summary_timeout: float = Field(
        20.0,
        gt=0,
        description="Longest a request waits for a summary; then it is trimmed instead and the "
        "summary finishes in the background for later turns. When the summarizer model's "
        "summaries are known to take longer (a moving average of its past ones), a request "
        "does not wait at all (`summary_deferred` in `x-shrink-actions`).",
    )
    summary_call_timeout: float = Field(
        180.0,
        gt=0,
        description="Longest one summarizer call may run, in the background once no request "
        "waits for it; then it is abandoned (and the next turn asks again).",
    )
    summary_max_pending: int = Field(
        8,
        ge=1,
        description="Summarizer calls in flight at once, per worker (one per span, shared by "
        "every request that drops that span); past it a request is trimmed without a summary.",
    )
    summary_max_tokens: int = Field(
        600, ge=64, le=8192, description="Length cap of a summary (tokens)."
    )
    summary_role: Literal["system", "user"] = Field(
        "system", description="Role of the message that holds the summary."
    )
    summary_cache_size: int = Field(
        1024, ge=0, description="Summaries kept in memory (by exact span), per worker."
    )
    summary_cache_mb: float = Field(
        8.0,
        gt=0,
        description="Characters (in millions) of summaries kept in memory per worker, whatever "
        "`SHRINK_SUMMARY_CACHE_SIZE` allows.",
    )

    # --- logging -------------------------------------------------------------------------------
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_format: Literal["auto", "json", "text"] = Field(
        "auto", description="Log line format; `auto` is JSON unless stderr is a terminal."
    )

    @field_validator("upstream_api_key", "proxy_api_key", "summary_api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v: object) -> object:
        # `SHRINK_UPSTREAM_API_KEY=` in an env file means "no key", not "Bearer " with nothing.
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("context_window")
    @classmethod
    def _clamp_window(cls, v: int) -> int:
        return max(MIN_WINDOW, min(MAX_WINDOW, v))

    @field_validator("model_windows")
    @classmethod
    def _clamp_model_windows(cls, v: dict[str, int]) -> dict[str, int]:
        return {k: max(MIN_WINDOW, min(MAX_WINDOW, int(n))) for k, n in v.items()}

    @field_validator("upstream_url", "summary_url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @property
    def strips_billing_header(self) -> bool:
        """Whether /v1/messages removes the billing line's per-request value (billing_header)."""
        if self.billing_header != "auto":
            return self.billing_header == "strip"
        host = (urlsplit(self.upstream_url).hostname or "").lower()
        return not (host == "anthropic.com" or host.endswith(".anthropic.com"))

    def window_for(self, model: str | None) -> int:
        """The configured window for a model: its `model_windows` entry, else the default."""
        return self.explicit_window_for(model) or self.context_window

    def explicit_window_for(self, model: str | None) -> int | None:
        """The `model_windows` entry for a model: exact key, else the longest matching prefix."""
        if model and self.model_windows:
            if model in self.model_windows:
                return self.model_windows[model]
            best = max((k for k in self.model_windows if model.startswith(k)), key=len, default="")
            if best:
                return self.model_windows[best]
        return None


def settings_to_env(settings: Settings) -> dict[str, str]:
    """The settings as SHRINK_* variables, so worker processes rebuild the very same Settings."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        field = Settings.model_fields[name]
        key = field.validation_alias if isinstance(field.validation_alias, str) else None
        key = key or f"SHRINK_{name.upper()}"
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[key] = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return env


def export_settings(settings: Settings) -> None:
    """Put the settings in this process's environment, for worker processes to read back."""
    os.environ.update(settings_to_env(settings))


def _tiktoken_cache_dir(environ: os._Environ[str] | dict[str, str]) -> str:
    """Where tiktoken itself would look (tiktoken.load.read_file_cached)."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if environ.get(name):
            return environ[name]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def load_settings(env_file: str | None = None, **overrides: Any) -> Settings:
    """Env (and an env file) first, explicit overrides (CLI flags) on top."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    if env_file is not None:
        if not os.path.isfile(env_file):
            raise FileNotFoundError(f"env file not found: {env_file}")
        return Settings(_env_file=env_file, **clean)  # type: ignore[call-arg]
    return Settings(**clean)  # type: ignore[call-arg]


def settings_table() -> str:
    """Markdown table of every setting, its env variable, default and description."""
    rows = ["| env | default | description |", "|---|---|---|"]
    # The proxy's own settings in their order, then the MCP server's (declared apart).
    fields = sorted(Settings.model_fields.items(), key=lambda i: i[0] in McpSettings.model_fields)
    for name, f in fields:
        env = (
            f.validation_alias if isinstance(f.validation_alias, str) else f"SHRINK_{name.upper()}"
        )
        if name == "tiktoken_cache_dir":
            shown = "tiktoken's"
        else:
            default = f.default_factory() if f.default_factory else f.default  # type: ignore[call-arg]
            shown = "" if default is None else f"`{default}`"
        rows.append(f"| `{env}` | {shown} | {f.description or ''} |")
    return "\n".join(rows)


def child_environment() -> dict[str, str]:
    """The environment of a command the MCP server runs: this process's, less the proxy's own
    configuration (`SHRINK_*`: the upstream and inbound keys are there). Read here, with every
    other variable the proxy reads. Not a sandbox: only what is not the command's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SHRINK_")}
