"""Bounded retries for the errors that say retrying may help (429, 5xx, transport).

Only wrap idempotent calls (get/list/replace with resourceVersion/patch/apply/delete)
or creates whose AlreadyExists the caller handles: a create that timed out may
have happened.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from swerollout.kube.errors import KubeError

T = TypeVar("T")


def backoff_delays(attempts: int, base: float, cap: float) -> list[float]:
    """Full-jitter exponential backoff: the pause before try 2, 3, ... (attempts - 1 values)."""
    return [random.uniform(0, min(cap, base * 2**i)) for i in range(max(0, attempts - 1))]


def _honour_hint(delay: float, exc: KubeError, cap: float) -> float:
    # The server's Retry-After is a floor, still capped so one answer cannot stall us.
    if exc.retry_after_seconds is None:
        return delay
    return min(cap, max(delay, exc.retry_after_seconds))


def retry(fn: Callable[[], T], *, attempts: int = 5, base_delay: float = 0.2, max_delay: float = 5.0) -> T:
    """Call ``fn`` until it succeeds, a non-retryable KubeError is raised, or attempts run out."""
    delays = backoff_delays(attempts, base_delay, max_delay)
    for delay in delays:
        try:
            return fn()
        except KubeError as exc:
            if not exc.retryable:
                raise
            delay = _honour_hint(delay, exc, max_delay)
        time.sleep(delay)
    return fn()


async def aretry(
    fn: Callable[[], Awaitable[T]], *, attempts: int = 5, base_delay: float = 0.2, max_delay: float = 5.0
) -> T:
    """The asyncio twin of :func:`retry`."""
    delays = backoff_delays(attempts, base_delay, max_delay)
    for delay in delays:
        try:
            return await fn()
        except KubeError as exc:
            if not exc.retryable:
                raise
            delay = _honour_hint(delay, exc, max_delay)
        await asyncio.sleep(delay)
    return await fn()
