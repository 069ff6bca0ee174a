"""The one backoff rule: bounded by tries or by time, jittered, honouring Retry-After within a cap."""

from __future__ import annotations

import random

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
