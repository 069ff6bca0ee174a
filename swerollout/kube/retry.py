"""Bounded retries of Kubernetes calls for the errors that say retrying may help (429, 5xx, transport).

Only wrap idempotent calls (get/list/replace with resourceVersion/patch/apply/delete)
or creates whose AlreadyExists the caller handles: a create that timed out may
have happened. The pauses follow `swerollout.backoff`, the project's one backoff rule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from swerollout.backoff import Backoff
from swerollout.kube.errors import KubeError

T = TypeVar("T")

KUBE_BACKOFF = Backoff(first_seconds=0.2, max_seconds=5.0, attempts=5)
"""Default for one API call: five tries within a few seconds."""


def retry(fn: Callable[[], T], *, policy: Backoff = KUBE_BACKOFF) -> T:
    """Call ``fn`` until it succeeds, a non-retryable KubeError is raised, or the policy gives up."""
    schedule = policy.start()
    while True:
        try:
            return fn()
        except KubeError as exc:
            delay = schedule.next_delay(exc.retry_after_seconds) if exc.retryable else None
            if delay is None:
                raise
        time.sleep(delay)


async def aretry(fn: Callable[[], Awaitable[T]], *, policy: Backoff = KUBE_BACKOFF) -> T:
    """The asyncio twin of :func:`retry`."""
    schedule = policy.start()
    while True:
        try:
            return await fn()
        except KubeError as exc:
            delay = schedule.next_delay(exc.retry_after_seconds) if exc.retryable else None
            if delay is None:
                raise
        await asyncio.sleep(delay)
