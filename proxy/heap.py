"""Give freed heap memory back to the OS after large requests (glibc only).

A 200 KB request body, its parsed form and its re-encoded copy come from malloc's heap, not from
their own mappings once glibc's dynamic mmap threshold has risen past them. When they are freed,
the pages stay resident: the heap is left with holes between long-lived objects, and RSS only
grows, round after round of large requests of different shapes. `malloc_trim(0)` hands the free
pages in those holes back (glibc >= 2.8 releases them anywhere in the heap, not only at its top).

It is called at most once per interval, only when a large body was seen since the last call, and
in a thread (ctypes releases the GIL). It is not free: under 64 concurrent 192 KB requests a trim
took 1.5 ms at the median and up to 14 ms, holding each malloc arena's lock in turn, so it is not
run more often (every 0.25 s lowered the peak by only 2 MB more). Measured with
`bench/overhead --scenario large`: the peak RSS of a proxy that forwards those bodies untrimmed
fell from 156 to 148 MB, and RSS after the load from 156 to 118 MB, CPU per request unchanged
within the noise. Where there is no glibc (musl, macOS) this is a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

LARGE_BODY = 64 * 1024  # bytes: smaller bodies come and go in pymalloc arenas and small chunks


def _load_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrimmer:
    """Remembers that a large body passed through; `run` trims after it, once per interval."""

    def __init__(
        self,
        interval: float,
        large_bytes: int = LARGE_BODY,
        *,
        trim: Callable[[int], int] | None = None,
        on_trim: Callable[[], object] | None = None,
    ):
        self.interval = interval
        self.large_bytes = large_bytes
        self._trim = trim if trim is not None else (_load_trim() if interval > 0 else None)
        self._on_trim = on_trim
        self._pending = False

    @property
    def enabled(self) -> bool:
        return self._trim is not None and self.interval > 0

    def note(self, size: int) -> None:
        """A request body of `size` bytes was read (called on the request path: a comparison)."""
        if size >= self.large_bytes:
            self._pending = True

    def trim_if_pending(self) -> bool:
        """One trim if a large body was seen since the last one (blocking; run it in a thread)."""
        if not self._pending or self._trim is None:
            return False
        self._pending = False
        self._trim(0)
        if self._on_trim is not None:
            self._on_trim()
        return True

    async def run(self) -> None:
        """Trim every `interval` seconds while large bodies keep arriving (until cancelled)."""
        if not self.enabled:
            return
        while True:
            await asyncio.sleep(self.interval)
            if self._pending:
                await asyncio.to_thread(self.trim_if_pending)
