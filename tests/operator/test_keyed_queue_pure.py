"""The keyed work queue: a key is queued once however often it is added, and each pass
tells how long its key waited for a worker (swerollout_work_queue_wait_seconds)."""

from __future__ import annotations

import asyncio

from swerollout_operator.runtime import KeyedQueue


def test_a_key_queued_many_times_is_worked_once_and_its_wait_is_told() -> None:
    async def main() -> tuple[list[str], list[float]]:
        worked: list[str] = []
        waits: list[float] = []
        gate = asyncio.Event()

        async def work(key: str) -> None:
            await gate.wait()
            worked.append(key)

        queue = KeyedQueue(work, workers=1, on_wait=waits.append)
        queue.start()
        queue.add("a")  # taken at once by the one worker, which then waits on the gate
        await asyncio.sleep(0)
        for _ in range(3):
            queue.add("b")  # queued behind "a" while the worker is busy: once
        await asyncio.sleep(0.2)
        gate.set()
        await asyncio.wait_for(queue.idle.wait(), 5)
        await queue.stop()
        return worked, waits

    worked, waits = asyncio.run(main())
    assert worked == ["a", "b"]
    assert len(waits) == 2
    # "b" waited (from its first add) for the busy worker, at least the 0.2 s it was busy.
    assert waits[1] >= 0.19 and waits[1] > waits[0], waits
