"""The one backoff rule every retry loop uses: full-jitter exponential, bounded, and the one
retry loop built on it.

The loop, for any call that may be retried::

    async for attempt in policy.retrying(retryable=lambda exc: isinstance(exc, Busy)):
        with attempt:
            return await call()

A failure the predicate calls retryable is swallowed, the loop sleeps what the policy's
`Schedule` says and tries again; once the tries or the time budget are spent, or on any
other failure, the exception goes up as it was raised. `Retrying.schedule` tells how many
retries were made (for the caller's own error message). There is no blocking twin: the
blocking clients (`KubeClient`, `RolloutClient`) run the async code behind a portal. A wait that another event may end early (an abort) is the loop's ``sleep=``; code that
must interleave its waits with other events in ways a loop cannot say asks a `Schedule`
directly.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Attempt", "Backoff", "Retrying", "Schedule"]


class Backoff(BaseModel):
    """A retry policy. Either bound (or both) ends the retries; with neither they go on forever."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    first_seconds: float = Field(default=0.5, gt=0)
    """The cap of the first pause (before jitter); it doubles with each retry."""
    max_seconds: float = Field(default=15.0, gt=0)
    """The cap of any one pause, including one the server asked for with Retry-After."""
    attempts: int | None = Field(default=None, ge=1)
    """Total tries including the first; None: no count limit."""
    budget_seconds: float | None = Field(default=None, ge=0)
    """Give up once the next pause would end past this much time since the first try; None: no time limit."""

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """The pause before retry number ``retry`` (0 = the first retry), full jitter."""
        ceiling = min(self.max_seconds, self.first_seconds * 2.0 ** min(retry, 60))
        return (rng or random).uniform(0.0, ceiling)

    def start(self, *, clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> Schedule:
        return Schedule(self, clock=clock, rng=rng)

    def retrying(
        self,
        *,
        retryable: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None] = lambda _: None,
        on_retry: Callable[[BaseException, float], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
    ) -> Retrying:
        """The retry loop for async code (see the module's docstring). ``sleep`` replaces
        asyncio.sleep for the pauses: a wait that another event may end early (an abort)."""
        return Retrying(
            self.start(rng=rng), retryable=retryable, retry_after=retry_after, on_retry=on_retry, sleep=sleep
        )


class Schedule:
    """One run of retries under a `Backoff` policy."""

    def __init__(self, policy: Backoff, *, clock: Callable[[], float], rng: random.Random | None) -> None:
        self.policy = policy
        self._clock = clock
        self._rng = rng
        self._started = clock()
        self.retries = 0
        """Retries granted so far."""

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """Seconds to wait before the next try, or None to give up.

        A server's Retry-After is honoured as a floor, still capped by ``max_seconds``
        so that one answer cannot stall the caller.
        """
        policy = self.policy
        if policy.attempts is not None and self.retries + 1 >= policy.attempts:
            return None
        delay = policy.delay(self.retries, self._rng)
        if retry_after is not None and retry_after > 0:
            delay = min(policy.max_seconds, max(delay, retry_after))
        if policy.budget_seconds is not None and self.elapsed + delay > policy.budget_seconds:
            return None
        self.retries += 1
        return delay


class Attempt:
    """One try of a retry loop: a context manager that swallows a failure worth retrying."""

    def __init__(self, loop: _Loop) -> None:
        self._loop = loop

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return self._loop.settle(exc)


class _Loop:
    """What the async and the blocking loops share: deciding after each try."""

    def __init__(
        self,
        schedule: Schedule,
        *,
        retryable: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None],
        on_retry: Callable[[BaseException, float], None] | None,
    ) -> None:
        self.schedule = schedule
        self._retryable = retryable
        self._retry_after = retry_after
        self._on_retry = on_retry
        self._pause: float | None = None
        self._done = False
        self._tried = False
        self.last_error: BaseException | None = None
        """The failure that the last retry followed."""

    def settle(self, exc: BaseException | None) -> bool:
        if exc is None:
            self._done = True
            return False
        # Cancellation and interpreter exits are never retried, whatever the predicate says.
        if not isinstance(exc, Exception) or not self._retryable(exc):
            return False
        delay = self.schedule.next_delay(self._retry_after(exc))
        if delay is None:
            return False  # spent: the failure goes up as it was raised
        self.last_error = exc
        self._pause = delay
        if self._on_retry is not None:
            self._on_retry(exc, delay)
        return True

    def _next_pause(self) -> float | None:
        """None ends the loop; else the pause before the next try (0 before the first)."""
        if self._done:
            return None
        if not self._tried:
            self._tried = True
            return 0.0
        if self._pause is None:
            raise RuntimeError("a retry loop's body must run inside `with attempt:`")
        pause, self._pause = self._pause, None
        return pause


class Retrying(_Loop):
    """``async for attempt in policy.retrying(...)``: see the module's docstring."""

    def __init__(
        self,
        schedule: Schedule,
        *,
        retryable: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None],
        on_retry: Callable[[BaseException, float], None] | None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(schedule, retryable=retryable, retry_after=retry_after, on_retry=on_retry)
        self._sleep = sleep

    def __aiter__(self) -> Retrying:
        return self

    async def __anext__(self) -> Attempt:
        pause = self._next_pause()
        if pause is None:
            raise StopAsyncIteration
        if pause:
            await (self._sleep or asyncio.sleep)(pause)
        return Attempt(self)
