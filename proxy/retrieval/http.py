"""`GET /v1/retrieve/{hash}`: a page of the original behind a ref, for clients and tools.

Guarded like every /v1 route (the proxy's key when one is set). Query: `start_line`,
`end_line` (1-based, inclusive), `search` (the lines holding it, `|` between alternatives,
case-insensitive), `max_lines`, `max_bytes` (at most the settings' page bounds).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from proxy.errors import InvalidRequest, RefGone
from proxy.inbound import authorize, state_of
from proxy.pipeline.refs import REF_RE
from proxy.retrieval.pages import Output, read_page
from proxy.retrieval.store import Gone


def _int(request: Request, name: str, default: int | None, low: int = 1) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise InvalidRequest(f"`{name}` must be an integer, not {value[:40]!r}") from None
    if n < low:
        raise InvalidRequest(f"`{name}` must be at least {low}")
    return n


async def retrieve(request: Request, ref: str) -> JSONResponse:
    state = state_of(request)
    authorize(request, state)
    settings = state.settings
    ref = ref.strip().lower()
    if not REF_RE.fullmatch(f"hash={ref}"):
        raise InvalidRequest("a hash is the 24 hex characters after `hash=` in a marker")
    start = _int(request, "start_line", 1)
    end = _int(request, "end_line", None)
    lines = min(_int(request, "max_lines", None) or settings.retrieve_page_lines, 100_000)
    size = min(_int(request, "max_bytes", None, 256) or settings.retrieve_page_bytes, 10_000_000)
    try:
        text = await state.retrieval.get(ref)
    except Gone as exc:
        raise RefGone(str(exc)) from None
    page = read_page(
        Output(ref, "", text, 0.0),
        start or 1,
        end,
        request.query_params.get("search") or None,
        max_lines=lines,
        max_bytes=size,
    )
    doc = page.as_dict()
    doc["hash"] = doc.pop("ref")
    return JSONResponse(doc)
