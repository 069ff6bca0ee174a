"""Memory that a burst freed, handed back to the system.

A burst of passes (a batch created, aborted or resumed) decodes thousands of bodies and
builds thousands of models that live for a moment. CPython gives most of them back to
glibc's malloc, which keeps the freed pages: the operator's RSS stayed at its high-water
mark long after the burst (measured at 2,000 rollouts parked: malloc_trim(0) gave back
15 MB of 211, about 7.5 KiB per rollout). malloc_trim(0) returns the free pages of every
malloc arena. It walks the heap (tens of ms per hundred MB), so it runs in a thread and
at most once per TRIM_EVERY_SECONDS, after a release of many parsed models (the end of a
burst's passes).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
TRIM_EVERY_SECONDS = 60.0
TRIM_AFTER_RELEASED = 100
"""Parsed models released in one sweep that mark the end of a burst."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


class Trimmer:
    def __init__(self, every_seconds: float = TRIM_EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._trim = _malloc_trim()
        self._last = float("-inf")
        self._running: asyncio.Task[None] | None = None
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def after_release(self, released: int) -> bool:
        """Note that `released` parsed models were dropped; True when a trim was started."""
        if self._trim is None or released < TRIM_AFTER_RELEASED:
            return False
        now = time.monotonic()
        if now - self._last < self.every_seconds or (self._running is not None and not self._running.done()):
            return False
        self._last = now
        self._running = asyncio.create_task(self._run(self._trim))
        return True

    async def _run(self, trim: Callable[[int], int]) -> None:
        try:
            # ctypes lets go of the GIL during the call: the event loop runs on meanwhile.
            await asyncio.to_thread(trim, 0)
            self.trims += 1
        except Exception:  # noqa: BLE001 - a failed trim only costs memory
            log.exception("malloc_trim failed")

    async def aclose(self) -> None:
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
