"""What every route reads of an inbound request: headers, the body, the key, the request id."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from fastapi import Request

from proxy.errors import PayloadTooLarge, Unauthorized, UnsupportedMediaType
from proxy.upstream import new_request_id

if TYPE_CHECKING:
    from proxy.state import AppState

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/")


def header(request: Request, name: str, default: str | None = None) -> str | None:
    """A request header by lower-case name (the first, if sent twice).

    Starlette's `request.headers.get` scans every header per lookup and raises and catches a
    KeyError for each absent one; a handler asks for half a dozen, mostly absent.
    """
    headers = request.scope.get("shrink.headers")
    if headers is None:
        headers = request.scope["shrink.headers"] = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(request.scope["headers"])
        }
    return headers.get(name, default)  # type: ignore[no-any-return]


def state_of(request: Request) -> AppState:
    return request.app.state.shrink  # type: ignore[no-any-return]


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, refusing (413) anything over the limit without reading it all."""
    declared = header(request, "content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"The request body is {int(declared):,} bytes; the limit is {limit:,}."
        )
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is over the limit of {limit:,} bytes.")
        parts.append(chunk)
    return b"".join(parts)


def authorize(request: Request, state: AppState) -> None:
    """With an inbound key configured, only clients that present it get through."""
    expected = state.settings.proxy_api_key
    if expected is None:
        return
    auth = header(request, "authorization") or ""
    # Bearer (OpenAI SDKs), api-key (Azure's), x-api-key (Anthropic's SDK and Claude Code).
    presented = (
        auth[7:].strip()
        if auth[:7].lower() == "bearer "
        else header(request, "api-key") or header(request, "x-api-key") or ""
    )
    if not hmac.compare_digest(presented.encode(), expected.get_secret_value().encode()):
        raise Unauthorized(
            "Missing or incorrect API key for this proxy: send it as 'Authorization: Bearer KEY', "
            "'api-key: KEY' or 'x-api-key: KEY'."
        )


def request_id_of(request: Request) -> str:
    return header(request, "x-request-id") or new_request_id()


def check_content_type(request: Request) -> None:
    ctype = (header(request, "content-type") or "").lower()
    if ctype.startswith(FORM_TYPES):
        raise UnsupportedMediaType(
            f"Content-Type {ctype.split(';')[0]} is not supported; send the request as "
            "JSON with 'Content-Type: application/json'."
        )
