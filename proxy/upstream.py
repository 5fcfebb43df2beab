"""The upstream HTTP client: one pooled httpx client per process; open, stream, close.

httpx exceptions are mapped to `ProxyError`s here and nowhere else. Targets are built only from the
configured base URL plus a validated path: nothing in a request (Host header, absolute URI, `..`)
can point the proxy at another host or outside the base path.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

from proxy.errors import InvalidRequest, NotFound, UpstreamTimeout, UpstreamUnavailable

# RFC 9110 §7.6.1 hop-by-hop headers, plus those httpx/uvicorn must compute themselves.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Response headers the proxy's own server sets.
RESPONSE_DROP = HOP_BY_HOP | {"date", "server"}
AUTH_HEADERS = frozenset({"authorization", "api-key"})


@dataclass(frozen=True)
class Timeouts:
    connect: float
    first_byte: float
    idle: float
    write: float


def _strip_hop_by_hop(
    headers: Iterable[tuple[str, str]], drop: frozenset[str]
) -> list[tuple[str, str]]:
    """Drop hop-by-hop headers, including any the Connection header names."""
    pairs = list(headers)
    named = {
        t.strip().lower()
        for k, v in pairs
        if k.lower() == "connection"
        for t in v.split(",")
        if t.strip()
    }
    return [(k, v) for k, v in pairs if k.lower() not in drop and k.lower() not in named]


def request_headers(
    client_headers: Iterable[tuple[str, str]],
    *,
    api_key: str | None,
    request_id: str,
    body_changed: bool,
    drop_client_auth: bool = False,
) -> list[tuple[str, str]]:
    """Headers to send upstream: the client's end-to-end headers, our key if configured, an id.

    `drop_client_auth`: the client's key was the proxy's own inbound key and must not leak on.
    """
    out = _strip_hop_by_hop(client_headers, HOP_BY_HOP)
    had_azure_key = any(k.lower() == "api-key" for k, _ in out)
    if drop_client_auth:
        out = [(k, v) for k, v in out if k.lower() not in AUTH_HEADERS]
    if body_changed:
        # The encoding of the client's body no longer describes ours.
        out = [(k, v) for k, v in out if k.lower() != "content-encoding"]
    if api_key is not None:
        out = [(k, v) for k, v in out if k.lower() not in AUTH_HEADERS]
        out.append(("authorization", f"Bearer {api_key}"))
        if had_azure_key:
            out.append(("api-key", api_key))
    if not any(k.lower() == "x-request-id" for k, _ in out):
        out.append(("x-request-id", request_id))
    return out


def response_headers(upstream: httpx.Response) -> list[tuple[str, str]]:
    return _strip_hop_by_hop(upstream.headers.multi_items(), RESPONSE_DROP)


def new_request_id() -> str:
    return "shrink-" + secrets.token_hex(12)


class Targets:
    """Maps a client path to the upstream URL, refusing anything that could escape the base."""

    def __init__(self, base_url: str):
        self.base = httpx.URL(base_url.rstrip("/"))
        path = self.base.raw_path.decode("ascii").split("?")[0].rstrip("/")
        self.base_path = path
        # Azure paths (/openai/...) are forwarded relative to the resource root: the base path
        # without a trailing /openai/v1, /openai or /v1.
        root = path
        for suffix in ("/openai/v1", "/openai", "/v1"):
            if root.endswith(suffix):
                root = root[: -len(suffix)]
                break
        self.root_path = root

    def url(self, raw_path: str, query: bytes) -> httpx.URL:
        """`raw_path` is the path as the client sent it (percent-encoded)."""
        check_path(raw_path)
        if raw_path == "/v1" or raw_path.startswith("/v1/"):
            path = self.base_path + raw_path[3:]
        elif raw_path.startswith("/openai/"):
            path = self.root_path + raw_path
        else:
            raise NotFound(f"Invalid URL ({raw_path})")
        raw = path.encode("ascii") + (b"?" + query if query else b"")
        return self.base.copy_with(raw_path=raw)


def check_path(raw_path: str) -> None:
    """Reject dot segments, encoded slashes/backslashes and control characters in a path."""
    if not raw_path.startswith("/") or raw_path.startswith("//"):
        raise InvalidRequest("Invalid request path.")
    try:
        raw_path.encode("ascii")
    except UnicodeEncodeError:
        raise InvalidRequest("Invalid request path.") from None
    lowered = raw_path.lower()
    if "%2f" in lowered or "%5c" in lowered or "\\" in raw_path:
        raise InvalidRequest("Encoded slashes are not allowed in the request path.")
    for segment in raw_path.split("/"):
        decoded = unquote(segment)
        if decoded in (".", "..") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):
            raise InvalidRequest("Invalid request path.")


class Upstream:
    """One pooled client for the process; the app's lifespan creates and closes it."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeouts: Timeouts,
        max_connections: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.targets = Targets(base_url)
        self.api_key = api_key
        self.timeouts = timeouts
        self.client = httpx.AsyncClient(
            # The read timeout is enforced by us (first byte vs idle differ); httpx gets none.
            timeout=httpx.Timeout(
                connect=timeouts.connect, read=None, write=timeouts.write, pool=timeouts.connect
            ),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            transport=transport,
            follow_redirects=False,
            trust_env=False,
        )
        # No default Accept-Encoding/User-Agent: only what the client sent goes upstream, so a
        # compressed answer reaches only clients that asked for one.
        self.client.headers.clear()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def open(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[str, str]],
        content: bytes | None,
    ) -> httpx.Response:
        """Send a request and return once the response headers are in (the body is unread)."""
        request = self.client.build_request(method, url, headers=headers, content=content)
        try:
            async with asyncio.timeout(self.timeouts.first_byte):
                return await self.client.send(request, stream=True)
        except TimeoutError:
            raise UpstreamTimeout(
                f"The upstream did not answer within {self.timeouts.first_byte:g}s."
            ) from None
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"Timed out talking to the upstream: {_describe(exc)}") from None
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"The upstream is unreachable: {_describe(exc)}") from None
        except OSError as exc:
            raise UpstreamUnavailable(f"The upstream is unreachable: {exc}") from None

    async def iter_body(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """Raw upstream bytes as they arrive; idle gaps longer than the idle timeout raise."""
        chunks = response.aiter_raw().__aiter__()
        idle = self.timeouts.idle
        while True:
            try:
                async with asyncio.timeout(idle):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise UpstreamTimeout(
                    f"The upstream sent nothing for {idle:g}s in the middle of its response."
                ) from None
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout(f"Upstream read timed out: {_describe(exc)}") from None
            except httpx.HTTPError as exc:
                raise UpstreamUnavailable(
                    f"The upstream connection failed mid-response: {_describe(exc)}"
                ) from None
            yield chunk


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
