"""A keyed work queue with bounded concurrency, in the shape of client-go's.

Watch events only say *which* rollout to look at; the work itself reads the
caches. So events for one key coalesce: a key is queued at most once, and a key
that changes while it is being worked on is queued again when that work ends
(never worked on twice at once). Retries are delayed adds, keyed: a rollout's
backoff delays only that rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from swerollout.backoff import Backoff, Schedule
from swerollout.kube import KubeError

log = logging.getLogger(__name__)

RECONCILE_BACKOFF = Backoff(first_seconds=0.5, max_seconds=60.0)
"""Retries of a failed pass over one rollout: no bound (a level-triggered controller
must get there), at most a minute apart."""


class KeyedBackoff:
    """When to try a key (a rollout) again after consecutive failures, on the project's
    one backoff rule. A retryable failure (429, 5xx, transport) follows the schedule; any
    other cannot be fixed by a quick retry, so it waits the longest pause at once.
    Success forgets the key."""

    def __init__(self, policy: Backoff = RECONCILE_BACKOFF) -> None:
        self.policy = policy
        self._schedules: dict[str, Schedule] = {}

    def failed(self, key: str, exc: BaseException) -> float:
        """Record a failure; returns the pause before the next try (seconds)."""
        schedule = self._schedules.setdefault(key, self.policy.start())
        if not (isinstance(exc, KubeError) and exc.retryable):
            schedule.retries += 1
            return self.policy.max_seconds
        delay = schedule.next_delay(exc.retry_after_seconds)
        return self.policy.max_seconds if delay is None else delay

    def succeeded(self, key: str) -> None:
        self._schedules.pop(key, None)


class KeyedQueue:
    def __init__(
        self,
        work: Callable[[str], Awaitable[None]],
        *,
        workers: int,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self._work = work
        self._workers = workers
        self._on_wait = on_wait
        """Told how long each key waited in the queue for a worker (seconds)."""
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: dict[str, float] = {}
        """Queued keys -> when they were queued (monotonic)."""
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.idle = asyncio.Event()
        self.idle.set()

    def __len__(self) -> int:
        return len(self._queued) + len(self._active)

    def add(self, key: str) -> None:
        """Work on `key` soon; a no-op when it is already queued."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued[key] = time.monotonic()
        self.idle.clear()
        self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        """Work on `key` after `delay` seconds (an earlier `add` wins)."""
        if key in self._queued or key in self._timers:
            return
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._dirty.discard(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"swerollout-worker-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            queued = self._queued.pop(key)
            if self._on_wait is not None:
                self._on_wait(time.monotonic() - queued)
            self._active.add(key)
            try:
                await self._work(key)
            except Exception:  # noqa: BLE001 - `work` handles its own errors; a worker never dies
                log.exception("work on %s failed", key)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                if not self._queued and not self._active:
                    self.idle.set()
