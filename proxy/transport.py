"""The connection layer under httpx's API (aiohttp's or httpx's own), and what its errors mean.

httpx-aiohttp wraps every aiohttp connection error in httpx.ConnectTimeout; the functions here
read the aiohttp error under it, so a refused connect, a timeout and a dropped connection are
told apart (502 or 504, resent or not, named in the log).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from proxy.errors import UpstreamTimeout, UpstreamUnavailable

# The reuse flag of the request being sent: aiohttp's connect runs in the sender's task.
_REUSED: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "shrink_upstream_reused", default=None
)


@contextlib.contextmanager
def watching_reuse() -> Iterator[list[bool]]:
    """A list that is not empty once the request sent inside took a kept-alive connection."""
    flag: list[bool] = []
    token = _REUSED.set(flag)
    try:
        yield flag
    finally:
        _REUSED.reset(token)


async def _note_reuse(*_: Any) -> None:
    flag = _REUSED.get()
    if flag is not None:
        flag.append(True)


def _reuse_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_note_reuse)
    return trace


def failure(exc: BaseException, what: str) -> UpstreamTimeout | UpstreamUnavailable:
    """A client error as the proxy's own: a timeout is a 504, anything else a 502."""
    if _is_timeout(exc):
        return UpstreamTimeout(f"Timed out talking to the upstream: {describe(exc)}")
    return UpstreamUnavailable(f"{what}: {describe(exc)}")


def dropped(exc: BaseException) -> bool:
    """Whether the connection was lost before any answer: closed or reset by the upstream, or
    closing as the request was written. Never a timeout or a refused connect."""
    cause = exc.__cause__ if isinstance(exc, httpx.HTTPError) else exc
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionResetError):
        return True
    return isinstance(cause, aiohttp.ClientOSError) and not isinstance(
        cause, aiohttp.ClientConnectorError | TimeoutError
    )


def _is_timeout(exc: BaseException) -> bool:
    """A timeout (504) rather than a failure (502), judged by the original error.

    httpx-aiohttp maps every aiohttp connection error, a refused or dropped connection
    included, to httpx.ConnectTimeout; the aiohttp exception it wraps says what happened.
    """
    cause = exc.__cause__ if isinstance(exc, httpx.HTTPError) else exc
    if isinstance(cause, aiohttp.ClientError):
        return isinstance(cause, aiohttp.ServerTimeoutError | TimeoutError)
    return isinstance(exc, httpx.TimeoutException)


def transport_for(kind: str, max_connections: int) -> httpx.AsyncBaseTransport | None:
    """The connection layer under httpx's API: httpx's own, or aiohttp's.

    Chosen by measurement (bench/overhead, bench/load): at 64 concurrent requests httpcore's
    pool spends most of its CPU re-scanning connections (encode/httpx#3215, encode/httpcore#1035;
    floor pass-through 279 req/s vs 1,576 over aiohttp), and 500 streams wait seconds for their
    first event. aiohttp's session adds Accept, Accept-Encoding, User-Agent and a default
    Content-Type of its own; they are skipped so only the client's headers go upstream.
    """
    if kind == "httpx":
        return None

    def session() -> aiohttp.ClientSession:  # made inside the event loop, on first use
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0),
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            auto_decompress=False,
            trust_env=False,
            trace_configs=[_reuse_trace()],
        )

    return AiohttpTransport(client=session)


def failure_name(exc: BaseException) -> str:
    """What kind of failure `exc` is, by what happened rather than by its wrapper's class.

    httpx-aiohttp wraps every aiohttp connection error, a refused connection included, in
    httpx.ConnectTimeout: a refused upstream reported as a timeout sends people looking at
    the network instead of at a backend that is not running."""
    cause = exc.__cause__ if isinstance(exc, httpx.HTTPError) else exc
    if isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(
        cause, aiohttp.ServerTimeoutError | TimeoutError
    ):
        return "ConnectError"
    return type(exc).__name__


def describe(exc: BaseException) -> str:
    """`ConnectError: connection refused`, or the error's own name and text."""
    name = failure_name(exc)
    cause = exc.__cause__ if isinstance(exc, httpx.HTTPError) else exc
    if isinstance(cause, aiohttp.ClientConnectorError):
        os_error = cause.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return f"{name}: connection refused"
        return f"{name}: {os_error.strerror or os_error}" if os_error else name
    if isinstance(exc, ConnectionRefusedError):
        return "ConnectError: connection refused"
    return f"{name}: {exc}" if str(exc) else name
