"""The one backoff rule: bounded by tries or by time, jittered, honouring Retry-After within a cap."""

from __future__ import annotations

import asyncio
import random

import pytest

from swerollout.backoff import Backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_attempts_bound_counts_the_first_try() -> None:
    schedule = Backoff(first_seconds=0.1, attempts=3).start(rng=random.Random(1))
    assert schedule.next_delay() is not None
    assert schedule.next_delay() is not None
    assert schedule.next_delay() is None  # three tries made: give up
    assert schedule.retries == 2


def test_pauses_grow_with_full_jitter_and_stay_capped() -> None:
    policy = Backoff(first_seconds=1.0, max_seconds=8.0)
    rng = random.Random(7)
    for retry in range(12):
        ceiling = min(8.0, 2.0**retry)
        samples = [policy.delay(retry, rng) for _ in range(200)]
        assert all(0.0 <= s <= ceiling for s in samples)
        assert max(samples) > ceiling * 0.8, "full jitter spans the whole range"


def test_budget_gives_up_before_overrunning() -> None:
    clock = FakeClock()
    schedule = Backoff(first_seconds=4.0, max_seconds=4.0, budget_seconds=10.0).start(clock=clock, rng=random.Random(3))
    waited = 0.0
    while (delay := schedule.next_delay()) is not None:
        clock.now += delay
        waited += delay
    assert waited <= 10.0
    assert schedule.retries >= 2
    clock.now += 100
    assert schedule.next_delay() is None


def test_retry_after_is_a_floor_within_the_cap() -> None:
    schedule = Backoff(first_seconds=0.001, max_seconds=2.0).start(rng=random.Random(0))
    assert schedule.next_delay(retry_after=1.5) == 1.5
    assert schedule.next_delay(retry_after=600) == 2.0
    assert schedule.next_delay(retry_after=None) is not None


class Busy(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        self.retry_after = retry_after


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, Busy)


async def test_the_retry_loop_retries_what_is_retryable_and_returns_the_result() -> None:
    calls: list[int] = []
    seen: list[float] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Busy()
        return "done"

    async def run() -> str:
        async for attempt in Backoff(first_seconds=0.001, max_seconds=0.002, attempts=5).retrying(
            retryable=_retryable, on_retry=lambda exc, delay: seen.append(delay)
        ):
            with attempt:
                return await flaky()
        raise AssertionError("unreachable: the loop returns or raises")

    assert await run() == "done"
    assert len(calls) == 3 and len(seen) == 2 and all(0 <= d <= 0.002 for d in seen)


async def test_the_retry_loop_gives_up_with_the_last_failure_and_never_retries_others() -> None:
    calls = 0

    async def always_busy() -> None:
        nonlocal calls
        calls += 1
        raise Busy()

    retrying = Backoff(first_seconds=0.001, attempts=3).retrying(retryable=_retryable)
    with pytest.raises(Busy):
        async for attempt in retrying:
            with attempt:
                await always_busy()
    assert calls == 3 and retrying.schedule.retries == 2

    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not a retryable failure")

    with pytest.raises(ValueError):
        async for attempt in Backoff(first_seconds=0.001, attempts=3).retrying(retryable=_retryable):
            with attempt:
                await broken()
    assert calls == 1


async def test_the_retry_loop_honours_retry_after_and_never_swallows_cancellation() -> None:
    pauses: list[float] = []
    retrying = Backoff(first_seconds=0.001, max_seconds=0.05, attempts=2).retrying(
        retryable=lambda exc: True,
        retry_after=lambda exc: getattr(exc, "retry_after", None),
        on_retry=lambda exc, delay: pauses.append(delay),
    )
    tries = 0
    async for attempt in retrying:
        with attempt:
            tries += 1
            if tries == 1:
                raise Busy(retry_after=0.04)
    assert tries == 2 and pauses and 0.04 <= pauses[0] <= 0.05

    tries = 0
    with pytest.raises(asyncio.CancelledError):
        async for attempt in Backoff(first_seconds=0.001).retrying(retryable=lambda exc: True):
            with attempt:
                tries += 1
                raise asyncio.CancelledError
    assert tries == 1


async def test_a_body_outside_its_attempt_is_a_programming_error() -> None:
    """A body that skips `with attempt:` would loop forever on a retry the loop never saw."""
    with pytest.raises(RuntimeError, match="inside `with attempt:`"):
        async for _attempt in Backoff(first_seconds=0.001).retrying(retryable=_retryable):
            pass


async def test_the_retry_loop_waits_with_the_callers_sleep_and_its_rng() -> None:
    """`sleep=`: a wait that another event may cut short (the SGLang client's abort);
    `rng=`: the same pauses for the same seed."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)  # returns at once, as an abort would end the wait

    async def pauses(seed: int) -> list[float]:
        waits.clear()
        tries = 0
        loop = Backoff(first_seconds=10.0, attempts=4).retrying(
            retryable=lambda exc: isinstance(exc, ConnectionError), sleep=sleep, rng=random.Random(seed)
        )
        with pytest.raises(ConnectionError):
            async for attempt in loop:
                with attempt:
                    tries += 1
                    raise ConnectionError("down")
        assert tries == 4
        return list(waits)

    first = await pauses(7)
    assert len(first) == 3 and all(0 <= w <= 40.0 for w in first)
    assert await pauses(7) == first  # the caller's rng: reproducible
