"""Memory a burst freed goes back to the system: glibc's malloc_trim runs in a thread
after a sweep released many parsed models, at most once a minute, never twice at once."""

from __future__ import annotations

import asyncio

from swerollout_operator.memory import TRIM_AFTER_RELEASED, Trimmer


def test_a_trim_follows_a_burst_and_is_rate_limited() -> None:
    async def main() -> tuple[list[bool], int]:
        trimmer = Trimmer(every_seconds=3600)
        assert trimmer.available  # glibc here
        started = [
            trimmer.after_release(TRIM_AFTER_RELEASED - 1),  # a few released: no burst ended
            trimmer.after_release(TRIM_AFTER_RELEASED),
            trimmer.after_release(10 * TRIM_AFTER_RELEASED),  # within the hour: not again
        ]
        await trimmer.aclose()
        return started, trimmer.trims

    started, trims = asyncio.run(main())
    assert started == [False, True, False]
    assert trims == 1
