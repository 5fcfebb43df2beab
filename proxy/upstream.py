"""The upstream HTTP client: one pooled httpx client per process; open, stream, close.

httpx exceptions are mapped to `ProxyError`s here (as proxy.transport reads them) and nowhere
else. Targets are built only from the configured base URL plus a validated path: nothing in a
request (Host header, absolute URI, `..`) can point the proxy at another host or outside the
base path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import httpx

from proxy.errors import InvalidRequest, NotFound, UpstreamTimeout, UpstreamUnavailable
from proxy.transport import describe, dropped, failure, watching_reuse

log = logging.getLogger(__name__)

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
AUTH_HEADERS = frozenset({"authorization", "api-key", "x-api-key"})


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
    # Anthropic's API takes its key as x-api-key (a bearer token there is an OAuth token).
    anthropic = any(k.lower() in ("x-api-key", "anthropic-version") for k, _ in out)
    if drop_client_auth:
        out = [(k, v) for k, v in out if k.lower() not in AUTH_HEADERS]
    if body_changed:
        # The encoding of the client's body no longer describes ours.
        out = [(k, v) for k, v in out if k.lower() != "content-encoding"]
    if api_key is not None:
        out = [(k, v) for k, v in out if k.lower() not in AUTH_HEADERS]
        if anthropic:
            out.append(("x-api-key", api_key))
        else:
            out.append(("authorization", f"Bearer {api_key}"))
        if had_azure_key:
            out.append(("api-key", api_key))
    if not any(k.lower() == "x-request-id" for k, _ in out):
        out.append(("x-request-id", request_id))
    return out


def response_headers(upstream: httpx.Response) -> list[tuple[str, str]]:
    """The upstream's end-to-end headers, decoded as latin-1 so that any byte round-trips.

    httpx decodes values as UTF-8 when it can; such a value (`€`) cannot be re-encoded for the
    client as latin-1, so the raw bytes are used instead.
    """
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers.raw]
    return _strip_hop_by_hop(raw, RESPONSE_DROP)


def _header_bytes(value: str) -> bytes:
    """Header values reach us decoded as latin-1 (Starlette); encode back to the same bytes."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # only from our own values, e.g. a configured key
        return value.encode("utf-8")


def loggable_url(url: str) -> str:
    """The URL as it may be logged: no `user:password@`, no query (keys live there at times)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# Request ids: a random prefix per process and a counter, unique across workers and restarts
# without a urandom call per request.
_ID_PREFIX = "shrink-" + secrets.token_hex(6)
_id_counter = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_id_counter):012x}"


URL_MEMO_SIZE = 256


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
        self._urls: dict[tuple[str, bytes], httpx.URL] = {}

    def url(self, raw_path: str, query: bytes) -> httpx.URL:
        """`raw_path` is the path as the client sent it (percent-encoded).

        Memoized: clients use a handful of paths, and building an httpx.URL (it re-parses the
        whole URL, host included) cost more than the rest of routing a small request.
        """
        key = (raw_path, query)
        url = self._urls.get(key)
        if url is None:
            url = self._url(raw_path, query)
            if len(self._urls) >= URL_MEMO_SIZE:
                self._urls.clear()  # a client sending endless distinct paths: start over
            self._urls[key] = url
        return url

    def _url(self, raw_path: str, query: bytes) -> httpx.URL:
        check_path(raw_path)
        if raw_path == "/v1" or raw_path.startswith("/v1/"):
            path = self.base_path + raw_path[3:]
        elif raw_path.startswith("/openai/"):
            path = self.root_path + raw_path
        else:
            raise NotFound(f"Invalid URL ({raw_path})")
        raw = path.encode("ascii") + (b"?" + query if query else b"")
        try:
            return self.base.copy_with(raw_path=raw)
        except httpx.InvalidURL:  # e.g. over httpx's 64 kB limit for a URL component
            raise InvalidRequest("The request path or query is too long or malformed.") from None


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
        # Credentials in the base URL (an upstream behind basic auth) become the Authorization
        # header, as httpx does by itself; aiohttp refuses a URL with credentials plus a header.
        url = httpx.URL(base_url)
        self.basic_auth: str | None = None
        if url.username or url.password:
            pair = f"{url.username}:{url.password}".encode()
            self.basic_auth = "Basic " + base64.b64encode(pair).decode("ascii")
            base_url = str(url.copy_with(username=None, password=None))
        self.targets = Targets(base_url)
        self.api_key = api_key
        self.timeouts = timeouts
        # The read timeout is enforced by us (first byte vs idle differ); httpx gets none.
        timeout = httpx.Timeout(
            connect=timeouts.connect, read=None, write=timeouts.write, pool=timeouts.connect
        )
        self._timeout = timeout.as_dict()
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        # What httpx.AsyncClient would build itself; held here so that `open` can use it directly.
        self.transport = transport or httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
        self.client = httpx.AsyncClient(
            timeout=timeout,
            limits=limits,
            transport=self.transport,
            follow_redirects=False,
            trust_env=False,
            # The proxy serves many clients: a cookie one upstream answer sets must never be
            # sent with another client's request (discovery and summary calls use this client).
            cookies=httpx.Cookies(CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))),
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
        # httpx would encode str values as ASCII and fail on a client's non-ASCII header bytes.
        if self.basic_auth is not None:
            headers = [(k, v) for k, v in headers if k.lower() != "authorization"]
            headers.append(("authorization", self.basic_auth))
        raw_headers = [(_header_bytes(k), _header_bytes(v)) for k, v in headers]
        # Straight to the transport: the client's machinery (cookie jar, auth flow, redirects,
        # event hooks, URL merging) is nothing a relay needs, and cost more CPU per request than
        # the rest of the proxy's own work on a small body. Cookies never persist this way.
        request = httpx.Request(
            method, url, headers=raw_headers, content=content, extensions={"timeout": self._timeout}
        )
        try:
            return await self._send(request)
        except BaseException:
            # Cancelled (client gone, first-byte timeout) or failed: see `_orphans`.
            await _close_all(self._orphans())
            raise

    async def _send(self, request: httpx.Request) -> httpx.Response:
        with watching_reuse() as reused:
            try:
                async with asyncio.timeout(self.timeouts.first_byte):
                    return await self._deliver(request, reused)
            except TimeoutError:
                raise UpstreamTimeout(
                    f"The upstream did not answer within {self.timeouts.first_byte:g}s."
                ) from None
            except (httpx.HTTPError, aiohttp.ClientError) as exc:
                raise failure(exc, "The upstream is unreachable") from None
            except OSError as exc:
                raise UpstreamUnavailable(f"The upstream is unreachable: {describe(exc)}") from None
            except Exception as exc:
                # A transport's own bug on a broken connection (seen: httpcore/anyio raising
                # AttributeError on a reset socket) is still a failed upstream, not our 500.
                log.warning("upstream transport failed unexpectedly", exc_info=True)
                raise UpstreamUnavailable(
                    f"The upstream connection failed: {describe(exc)}"
                ) from None

    async def _deliver(self, request: httpx.Request, reused: list[bool]) -> httpx.Response:
        try:
            return await self.transport.handle_async_request(request)
        except (httpx.HTTPError, aiohttp.ClientError) as exc:
            if not (reused and dropped(exc)):
                raise
            # A kept-alive connection the upstream closed as the request went out (llama-server
            # and uvicorn close idle ones after 5 s; the close can cross our write): it was lost
            # with nothing answered, and a generation has no side effect to repeat, so it goes
            # again, once. A new connection's failure is the upstream's own: never resent.
            log.info("upstream closed a kept-alive connection under a request; resent")
            return await self.transport.handle_async_request(request)

    def _orphans(self) -> list[Any]:
        """Take out of the pool the connections that no request owns and nobody can reuse.

        httpcore 1.0.9 leaves one behind when a request is cancelled between opening the TCP
        connection and sending on it (encode/httpcore#1093, #986): it is neither idle nor
        closed, so the pool never reaps it, and it holds a socket and one of `max_connections`
        slots for the life of the process. Under client aborts (a few per thousand) that ends in
        every request waiting for a slot. The check reads private pool state; if httpcore
        changes shape it finds nothing, and tests/test_faults_process.py notices.
        """
        pool = getattr(self.transport, "_pool", None)
        connections = getattr(pool, "_connections", None)
        requests = getattr(pool, "_requests", None)
        if not isinstance(connections, list) or not isinstance(requests, list):
            return []
        owned = {id(r.connection) for r in requests if getattr(r, "connection", None)}
        orphans = [
            c for c in connections if id(c) not in owned and not c.is_idle() and not c.is_closed()
        ]
        for c in orphans:
            connections.remove(c)
        return orphans

    async def iter_body(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """Raw upstream bytes as they arrive; idle gaps longer than the idle timeout raise.

        Straight from the transport's stream: `aiter_raw` only adds a re-chunker and a byte
        count (one more generator per chunk); the response is closed by the caller."""
        chunks = aiter(response.stream)  # type: ignore[arg-type]
        idle = self.timeouts.idle
        watch = IdleWatch(idle)
        try:
            while True:
                watch.waiting()
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if watch.expired():
                        raise UpstreamTimeout(
                            f"The upstream sent nothing for {idle:g}s in the middle of its "
                            "response."
                        ) from None
                    raise
                except (httpx.HTTPError, aiohttp.ClientError) as exc:
                    raise failure(exc, "The upstream connection failed mid-response") from None
                watch.got()
                yield chunk
        finally:
            watch.close()
            # A relay cut short (client gone) leaves httpx's generator suspended; close it now.
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()


class IdleWatch:
    """The idle timeout of one response body: cancels the reading task when it has waited for
    the next chunk longer than `idle` seconds.

    `asyncio.timeout` around every chunk cost a timer per chunk (a heap push, a cancelled
    handle); here one timer re-arms itself about once per `idle` period, and a chunk costs two
    clock reads. Time the consumer spends elsewhere (a slow client) is never counted.
    """

    __slots__ = ("_handle", "_idle", "_loop", "_since", "_task", "fired")

    def __init__(self, idle: float):
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._idle = idle
        self._since: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.fired = False

    def waiting(self) -> None:
        self._since = self._loop.time()
        if self._handle is None:
            self._handle = self._loop.call_at(self._since + self._idle, self._check)

    def got(self) -> None:
        self._since = None

    def _check(self) -> None:
        self._handle = None
        if self._since is None:
            return  # not waiting: the next wait arms a new timer
        due = self._since + self._idle
        if self._loop.time() >= due and self._task is not None:
            self.fired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def expired(self) -> bool:
        """Inside `except CancelledError`: True (and the cancel undone) if the timeout caused it."""
        if self.fired and self._task is not None:
            self._task.uncancel()
            return True
        return False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def _close_all(connections: list[Any]) -> None:
    for c in connections:
        with contextlib.suppress(Exception):
            # Shielded: this runs while a cancellation is on its way out.
            await asyncio.shield(c.aclose())
