"""Retrieval and shared-state settings (`SHRINK_RETRIEVE*`, `SHRINK_STORE_*`).

Declared apart like the MCP server's (proxy/settings_mcp.py); `Settings` inherits them, so they
are read with the rest, in the one place.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class StoreSettings(BaseModel):
    # --- retrieval and shared state ---------------------------------------------------------------
    retrieve: bool = Field(
        True,
        description="Keep the original of every elision (compacted tool results, dropped "
        "history) under a content hash named in its marker (`Retrieve more: hash=…`), readable "
        "at `GET /v1/retrieve/{hash}`; and when an agent's request carries tools, offer the "
        "model a `shrink_retrieve` tool the proxy answers itself, in flight, so the client "
        "never sees it. Clients turn it off per request with `x-shrink-retrieve: off`.",
    )
    retrieve_rounds: int = Field(
        3,
        ge=1,
        le=16,
        description="Most `shrink_retrieve` rounds the proxy serves in one request before it "
        "answers the client with what the model said last (its retrieval calls removed).",
    )
    retrieve_page_lines: int = Field(400, ge=1, description="Most lines one retrieved page holds.")
    retrieve_page_bytes: int = Field(
        16_000,
        ge=256,
        description="Most bytes (UTF-8) one retrieved page holds; smaller when the room left in "
        "the model's window is smaller.",
    )
    store_items: int = Field(
        4096, ge=1, description="Originals kept for retrieval in the embedded store."
    )
    store_mb: float = Field(
        64.0,
        gt=0,
        description="Megabytes of originals the embedded store keeps, as they take memory (1 to "
        "4 bytes a character); once it is full the process's RSS is about this much larger "
        "(bench.overhead --experiment retrieval: 64 MB full, +68 MB; 16 MB, +18 MB).",
    )
    store_ttl: float = Field(
        3600.0,
        gt=0,
        description="Seconds an original stays retrievable (in Redis, the key's TTL, refreshed "
        "whenever a request names it again).",
    )
    store_url: str | None = Field(
        None,
        description="`redis://host:port/db`: keep the retrieval store, the summary cache, learnt "
        "windows and calibration in Redis, shared by every replica and worker. Unset: in-process "
        "(nothing to install for one proxy).",
    )
    store_timeout: float = Field(
        0.25,
        gt=0,
        description="Seconds one Redis call may take before the request goes on with the "
        "in-process store (logged once, counted in /metrics); Redis is tried again later.",
    )
    store_retry: float = Field(
        2.0,
        gt=0,
        description="Seconds between tries to reach Redis again after a call to it failed or "
        "timed out; until it answers, requests do not wait for it at all.",
    )
    store_refresh: float = Field(
        5.0,
        gt=0,
        description="Seconds between background reads of the windows and calibration other "
        "replicas learnt (requests only read the copy in this process).",
    )
    store_summary_ttl: float = Field(
        86_400.0,
        gt=0,
        description="Seconds a summary stays in Redis, refreshed whenever a replica uses it.",
    )
    store_value_mb: float = Field(
        4.0,
        gt=0,
        description="Largest text (an original or a summary), in megabytes (characters), "
        "written to Redis; a larger one stays in this process only.",
    )
