"""What replicas learn about the backend, shared through Redis: windows stated by overflow
errors (proxy.discovery `remember`) and the token-count calibration (proxy.overflow).

Requests never read Redis for these: they read this process's own copy, as without Redis. Each
change is published in the background as it happens (a field of one Redis hash per kind, the
hash's TTL renewed), and every `interval` seconds a background task reads both hashes and adopts
what other replicas learnt: a window until the wall-clock time its replica gave it, a calibration
when it rests on more samples than ours. Windows a replica discovered by probing are not shared:
every replica probes on its own (one GET per model and TTL), and a forgotten window is re-probed
by the replica that saw the truncation.

Bounds: model names longer than `MAX_MODEL` are not published; a hash that grows past
`MAX_FIELDS` (client-chosen model names) is trimmed by the next reader, expired windows first,
then the least informed calibrations.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from proxy.discovery import WindowDiscovery
from proxy.overflow import Calibration, CalibrationState
from proxy.redis_link import PREFIX, RedisLink, Unavailable

if TYPE_CHECKING:
    from proxy.redis_link import Client

log = logging.getLogger(__name__)

WINDOWS = PREFIX + "windows"
CALIBRATION = PREFIX + "calibration"
CALIBRATION_TTL = 7 * 86_400  # a ratio is a property of a tokenizer pair: it holds for long
MAX_FIELDS = 256
MAX_MODEL = 200


class SharedLearning:
    """Publishes this replica's learnt windows and calibration; adopts the others'."""

    def __init__(
        self,
        link: RedisLink,
        calibration: Calibration,
        discovery: WindowDiscovery | None,
        *,
        interval: float,
        clock: Callable[[], float] = time.time,  # wall clock: expiries cross processes
    ) -> None:
        self.link = link
        self.calibration = calibration
        self.discovery = discovery
        self.interval = interval
        self.clock = clock
        self._dirty: dict[tuple[str, str], tuple[str, int]] = {}  # (hash, model) -> value, ttl
        self._flushing: asyncio.Task[None] | None = None  # the one flush in flight
        calibration.on_record = self.publish_calibration
        if discovery is not None:
            discovery.on_remember = self.publish_window

    def publish_window(self, model: str, window: int, ttl: float) -> None:
        value = orjson.dumps([window, self.clock() + ttl]).decode()
        self._publish(WINDOWS, model, value, math.ceil(ttl))

    def publish_calibration(self, model: str, state: CalibrationState) -> None:
        self._publish(CALIBRATION, model, orjson.dumps(list(state)).decode(), CALIBRATION_TTL)

    def _publish(self, key: str, model: str, value: str, ttl: int) -> None:
        """Coalesced, in order: one flush at a time writes the latest value of each field (a
        write per sample, in flight side by side, could land an older state last)."""
        if len(model) > MAX_MODEL:
            return
        self._dirty.pop((key, model), None)
        self._dirty[(key, model)] = (value, ttl)
        while len(self._dirty) > MAX_FIELDS:  # Redis away for long, many models: oldest out
            del self._dirty[next(iter(self._dirty))]
        self._start_flush()

    def _start_flush(self) -> None:
        if self._flushing is None and self._dirty:
            self._flushing = self.link.spawn(self._flush)
            if self._flushing is not None:
                self._flushing.add_done_callback(self._flushed)

    def _flushed(self, _: object) -> None:
        self._flushing = None
        self._start_flush()  # what was published since the flush's last batch

    async def _flush(self, redis: Client) -> None:
        while self._dirty:
            batch, self._dirty = self._dirty, {}
            async with redis.pipeline(transaction=False) as pipe:
                for (key, model), (value, ttl) in batch.items():
                    pipe.hset(key, model, value)
                    pipe.expire(key, max(1, ttl))
                await pipe.execute()

    async def run(self) -> None:
        """The background refresh, until cancelled (by the lifespan's shutdown)."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def refresh(self) -> None:
        """Read both hashes once and adopt what they say; never raises."""

        async def read(redis: Client) -> list[Any]:
            async with redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(WINDOWS)
                pipe.hgetall(CALIBRATION)
                return list(await pipe.execute())

        try:
            windows, ratios = await self.link.call(read)
        except Unavailable:
            return
        try:
            self._adopt(windows, ratios)
        except Exception:  # a value we cannot read must not end the refresh task
            log.exception("shared windows or calibration unreadable")

    def _adopt(self, windows: dict[str, str], ratios: dict[str, str]) -> None:
        now = self.clock()
        drop_windows: list[str] = []
        live: list[tuple[float, str]] = []
        for model, raw in windows.items():
            found = _decode(raw, 2)
            if found is None or not isinstance(found[0], int) or found[1] <= now:
                drop_windows.append(model)  # expired, or not ours to read
                continue
            live.append((found[1], model))
            if self.discovery is not None:
                self.discovery.adopt(model, found[0], found[1] - now)
        drop_ratios: list[str] = []
        informed: list[tuple[int, str]] = []
        for model, raw in ratios.items():
            state = _decode(raw, 3)
            if state is None or not isinstance(state[1], int) or state[0] is None:
                drop_ratios.append(model)
                continue
            informed.append((state[1], model))
            self.calibration.adopt(model, (float(state[0]), state[1], state[2]))
        # Past the bound: the windows that expire first, the calibrations with fewest samples.
        drop_windows += [m for _, m in sorted(live)[:-MAX_FIELDS]]
        drop_ratios += [m for _, m in sorted(informed)[:-MAX_FIELDS]]
        if drop_windows:
            self.link.spawn(lambda redis: redis.hdel(WINDOWS, *drop_windows))
        if drop_ratios:
            self.link.spawn(lambda redis: redis.hdel(CALIBRATION, *drop_ratios))


def _decode(raw: str, size: int) -> list[Any] | None:
    """A JSON list of `size` numbers (or nulls), or None."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, list) or len(value) != size:
        return None
    if not all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in value
    ):
        return None
    return value
