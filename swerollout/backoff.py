"""The one backoff rule every retry loop uses: full-jitter exponential, bounded.

A loop starts a `Schedule` from a `Backoff` policy and asks it, after each retryable
failure, how long to wait before the next try; `None` means give up (the tries or the
time budget are spent). Sync and async callers share it: only the sleep differs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Backoff", "Schedule"]


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
