"""The event loop's lag: a coroutine that blocks the loop shows as a late timer wake, and a
quiet loop as (almost) none (swerollout_event_loop_lag_seconds)."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import generate_latest

from swerollout_operator import looplag
from swerollout_operator.metrics import OperatorMetrics


def test_a_blocked_loop_is_seen_as_lag_and_a_quiet_one_is_not() -> None:
    async def main() -> list[float]:
        lags: list[float] = []
        watcher = asyncio.create_task(looplag.watch(lags.append, interval=0.05))
        await asyncio.sleep(0.3)  # a few quiet wakes
        quiet = len(lags)
        time.sleep(0.4)  # work that does not yield
        await asyncio.sleep(0.2)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        assert quiet >= 2
        return lags[:quiet] + [max(lags[quiet:])]

    *quiet, blocked = asyncio.run(main())
    assert blocked >= 0.3, blocked
    assert min(quiet) < 0.1, quiet
    assert all(lag >= 0 for lag in quiet)


def test_the_lag_histogram_is_on_the_registry() -> None:
    metrics = OperatorMetrics()
    metrics.event_loop_lag.observe(0.3)
    text = generate_latest(metrics.registry).decode()
    assert 'swerollout_event_loop_lag_seconds_bucket{le="0.25"} 0.0' in text
    assert 'swerollout_event_loop_lag_seconds_bucket{le="0.5"} 1.0' in text
