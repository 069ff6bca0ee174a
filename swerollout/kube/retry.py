"""Bounded retries of Kubernetes calls for the errors that say retrying may help (429, 5xx, transport).

Only wrap idempotent calls (get/list/replace with resourceVersion/patch/apply/delete)
or creates whose AlreadyExists the caller handles: a create that timed out may
have happened. The pauses follow `swerollout.backoff`, the project's one backoff rule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from swerollout.backoff import Backoff
from swerollout.kube.errors import KubeError

T = TypeVar("T")

KUBE_BACKOFF = Backoff(first_seconds=0.2, max_seconds=5.0, attempts=5)
"""Default for one API call: five tries within a few seconds."""


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and exc.retryable


def kube_retry_after(exc: BaseException) -> float | None:
    """The pause a KubeError asks for (a 429's Retry-After), for `Backoff.retrying`."""
    return exc.retry_after_seconds if isinstance(exc, KubeError) else None


async def aretry(fn: Callable[[], Awaitable[T]], *, policy: Backoff = KUBE_BACKOFF) -> T:
    """Call ``fn`` until it succeeds, a non-retryable KubeError is raised, or the policy gives up."""
    async for attempt in policy.retrying(retryable=_retryable, retry_after=kube_retry_after):
        with attempt:
            return await fn()
    raise AssertionError("unreachable: the retry loop returns or raises")
