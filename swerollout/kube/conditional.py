"""One read-modify-write loop for conditional writes, in the spirit of client-go's RetryOnConflict.

    result = await read_modify_write(
        obj,                        # what the caller read
        write=decide_and_write,     # decides from an object and writes conditionally on it
        read=read_again,            # the object again, after a race or a lost answer
        races=5,
        backoff=WRITE_BACKOFF,
    )

``write(obj)`` looks at what was read, returns at once when nothing is left to do, and
otherwise sends one write conditional on what it read (a resourceVersion, or a JSON
patch ``test``). The loop decides what happens after a failure:

- a lost race (``raced``, by default a 409 Conflict or a 422 from a failed ``test``):
  ``write`` decides again on a fresh read, at most ``races`` times in all (then
  :class:`RacesLost`);
- a failure that says retrying may help (a reset, a timeout, 429, 5xx): the write may
  have landed, so it is never sent again blind: the loop waits out ``backoff`` and
  ``write`` decides again on a fresh read, which shows a landed write as done;
- anything else, and a spent ``backoff``, goes up as raised.

The waits are those of ``Backoff.retrying`` (the project's one retry loop); a failed
re-read is retried by the same schedule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from swerollout.backoff import Backoff
from swerollout.kube.errors import Conflict, Invalid, KubeError

__all__ = ["RacesLost", "read_modify_write"]

T = TypeVar("T")
R = TypeVar("R")


class RacesLost(KubeError):
    """Other writers changed the object between our read and our write, time after time."""

    retryable = True


def lost_race(exc: KubeError) -> bool:
    """409 (someone wrote since our read) or 422 (a JSON patch `test` on what we read failed)."""
    return isinstance(exc, (Conflict, Invalid))


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and exc.retryable and not isinstance(exc, RacesLost)


def _retry_after(exc: BaseException) -> float | None:
    return exc.retry_after_seconds if isinstance(exc, KubeError) else None


async def read_modify_write(
    current: T,
    *,
    write: Callable[[T], Awaitable[R]],
    read: Callable[[], Awaitable[T]],
    races: int,
    backoff: Backoff,
    raced: Callable[[KubeError], bool] = lost_race,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> R:
    """Run ``write`` on ``current``, then on fresh reads after races and lost answers (see the module)."""
    if races < 1:
        raise ValueError(f"races must be at least 1, got {races}")
    lost = 0
    reread = False
    async for attempt in backoff.retrying(retryable=_transient, retry_after=_retry_after, on_retry=on_retry):
        with attempt:
            while True:
                if reread:
                    current = await read()
                reread = True
                try:
                    return await write(current)
                except KubeError as exc:
                    if exc.retryable or not raced(exc):
                        raise
                    lost += 1
                    if lost >= races:
                        raise RacesLost(f"the object kept changing under {lost} conditional writes: {exc}") from exc
    raise AssertionError("unreachable: the retry loop returns or raises")
