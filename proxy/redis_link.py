"""The one connection to Redis that the shared state goes through, and what to do without it.

Shared state (proxy.retrieval.redis, proxy.summary_cache, proxy.shared_learning) is an
optimisation across replicas, never a requirement: every replica also keeps its own copy in
process. So every call here is bounded by `timeout` and raises `Unavailable` rather than
anything of redis-py's. The first failure (an error, or no answer in time: a hung server still
accepts connections) marks Redis down, logs it once for the outage, and from then on calls fail
at once, without touching the network, so no request waits for a server known to be away; a
background task pings it every `retry` seconds and marks it up again when it answers.

Writes nobody waits for (a summary made, a learnt window) go through `spawn`: a bounded set of
background tasks, dropped (and counted) beyond `MAX_PENDING` rather than queued without end.

redis-py is an optional extra (`pip install 'shrink-proxy[redis]'`), imported only here (the
other modules name its client type `Client`, from here) and only when `SHRINK_STORE_URL` is set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from proxy.upstream import loggable_url

if TYPE_CHECKING:  # the other shared-state modules name the client as `Client`, from here
    from redis.asyncio import Redis
    from redis.asyncio import Redis as Client  # noqa: F401

log = logging.getLogger(__name__)

T = TypeVar("T")
# Every key this proxy writes starts with this: a change of what a value holds bumps the version,
# so replicas of two versions side by side never read each other's values.
PREFIX = "shrink:v1:"
MAX_PENDING = 256  # background writes in flight at once; more are dropped (and counted)
WRITERS = 8  # of which at most this many hold a connection: the rest leave the pool to requests
CONNECTIONS = 64
REASONS = ("timeout", "error", "down", "backlog")
MISSING = (
    "SHRINK_STORE_URL names a Redis server but redis-py is not installed: "
    "pip install 'shrink-proxy[redis]'"
)


class Unavailable(Exception):
    """Redis did not answer in time, failed, or is known to be down: go on without it."""


def connect(url: str, timeout: float) -> Redis:
    """redis-py's asyncio client for `url`, its own timeouts at `timeout` (ours bound the whole
    call anyway), and one immediate retry: after a restart of Redis the first command on each
    pooled connection fails, and the retry on a new connection is what makes recovery quick.
    A blocking pool: past `CONNECTIONS` a call waits for a free connection (within its timeout)
    instead of failing, so a burst of requests is not mistaken for an outage."""
    try:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:  # a configuration error: stop at startup and say what to install
        raise RuntimeError(MISSING) from None
    pool = BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        max_connections=CONNECTIONS,
        timeout=timeout,
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes its connections


class RedisLink:
    """Calls to one Redis server, each bounded by `timeout`; down/up state and its counts."""

    def __init__(
        self,
        client: Redis,
        url: str,
        *,
        timeout: float,
        retry: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.where = loggable_url(url)
        self.timeout = timeout
        self.retry = retry
        self.clock = clock
        self.up = True
        self.calls = 0
        self.outages = 0
        self.fallbacks = dict.fromkeys(REASONS, 0)  # reason -> calls that went on without Redis
        self.down_since: float | None = None
        self._pinging: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[Any]] = set()
        self._writers = asyncio.Semaphore(WRITERS)
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, *, timeout: float, retry: float, clock: Callable[[], float] = time.monotonic
    ) -> RedisLink:
        return cls(connect(url, timeout), url, timeout=timeout, retry=retry, clock=clock)

    async def call(self, fn: Callable[[Redis], Awaitable[T]]) -> T:
        """`await fn(client)` within `timeout`; raises Unavailable (and never anything else of
        Redis's) when it fails or when Redis is known to be down."""
        if not self.up or self._closed:
            self.fallbacks["down"] += 1
            raise Unavailable("down")
        self.calls += 1
        try:
            async with asyncio.timeout(self.timeout):
                return await fn(self.client)
        except TimeoutError:
            self._failed("timeout", f"no answer within {self.timeout:g}s")
        except Exception as exc:  # redis-py's errors, OSError, a reply we could not read
            self._failed("error", _describe(exc))
        raise Unavailable("failed")

    def spawn(self, fn: Callable[[Redis], Awaitable[object]]) -> asyncio.Task[None] | None:
        """`call(fn)` in the background, for writes nobody waits for; None when it is not even
        started (Redis known down, too many pending). From the event loop only."""
        loop = asyncio.get_running_loop()
        if not self.up or self._closed:
            self.fallbacks["down"] += 1
            return None
        if len(self._pending) >= MAX_PENDING:
            self.fallbacks["backlog"] += 1
            return None
        task = loop.create_task(self._quietly(fn))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _quietly(self, fn: Callable[[Redis], Awaitable[object]]) -> None:
        async with self._writers:  # the timeout starts once it is this write's turn
            try:
                await self.call(fn)
            except Unavailable:
                pass  # counted and logged by call()

    def _failed(self, reason: str, why: str) -> None:
        self.fallbacks[reason] += 1
        if not self.up:
            return
        self.up = False
        self.outages += 1
        self.down_since = self.clock()
        log.warning(
            "Redis at %s unavailable (%s): going on with the in-process state, retrying every %gs",
            self.where,
            why,
            self.retry,
        )
        if not self._closed:
            self._pinging = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Ping every `retry` seconds until Redis answers; then requests use it again."""
        while not self._closed:
            await asyncio.sleep(self.retry)
            try:
                async with asyncio.timeout(self.timeout):
                    await self.client.ping()
            except Exception:  # still away; Timeout included
                continue
            away = self.clock() - (self.down_since or self.clock())
            log.warning(
                "Redis at %s is back after %.1fs: shared state in use again", self.where, away
            )
            self.up = True
            self.down_since = None
            return

    def info(self) -> dict[str, Any]:
        """Figures for /metrics (proxy.store_metrics)."""
        return {
            "up": self.up,
            "calls": self.calls,
            "outages": self.outages,
            "fallbacks": dict(self.fallbacks),
            "pending": len(self._pending),
        }

    async def aclose(self) -> None:
        """Stop pinging, let pending writes finish for a moment, close the connections."""
        self._closed = True
        if self._pinging is not None:
            self._pinging.cancel()
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=self.timeout)
            for task in list(self._pending):
                task.cancel()
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.aclose()
        except Exception:  # closing a connection to a server that is gone: nothing to do
            pass


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
