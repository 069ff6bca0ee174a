"""How late the operator's event loop wakes a timer: the time a ready coroutine waits
behind work that does not yield (a large report's parse, a CPU-heavy pass).

Every ingest answer, watch event and API response waits that long on top of its own time,
so a histogram of it tells a slow API server apart from a busy operator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

INTERVAL_SECONDS = 0.25
"""Often enough to catch a stall of a few hundred ms; each wake costs microseconds."""


async def watch(observe: Callable[[float], None], interval: float = INTERVAL_SECONDS) -> None:
    """Sleep `interval` again and again, and observe how far past it each wake came."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - started - interval))
