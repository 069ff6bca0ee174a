"""The once-a-second sweep's bookkeeping, as pure functions: the heap of deadlines (only
what is due comes out; a changed body reschedules; a deadline that fired and changed
nothing comes back later) and the set of unwritten progress (a report is answered at
once; the sweep takes what is due, oldest first, at most as many as it may write)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.wire.ingest import ProgressReport
from swerollout_operator.cache import RolloutCache, Tracked
from swerollout_operator.deadlines import RECHECK_SECONDS, DeadlineQueue
from swerollout_operator.metrics import OperatorMetrics
from swerollout_operator.progress import ProgressCoalescer

from .test_pure import rollout


def _iso(at: datetime) -> str:
    return at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _body(i: int, *, created_ago: float, phase: str = "Starting", rv: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"r{i}",
            "namespace": "ns",
            "uid": f"u{i}",
            "resourceVersion": str(rv),
            "generation": 1,
            "creationTimestamp": _iso(datetime.now(UTC) - timedelta(seconds=created_ago)),
        },
        "spec": rollout(sandbox={"startupTimeoutSeconds": 60}).spec.model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        "status": {"phase": phase},
    }


def test_the_deadline_heap_gives_only_what_is_due_and_follows_body_changes() -> None:
    cache = RolloutCache()
    queue = DeadlineQueue()
    # 1,000 starting rollouts, one of them created 100 s ago (its 60 s startup deadline passed).
    for i in range(1000):
        entry, _ = cache.observe(_body(i, created_ago=100 if i == 7 else 0))
        queue.update(entry)
    assert len(queue) == 1000
    now = datetime.now(UTC).timestamp()
    assert queue.pop_due(now) == ["u7"]
    assert queue.pop_due(now) == [], "fired once; not again at once"
    assert queue.pop_due(now + RECHECK_SECONDS) == ["u7"], "its pass changed nothing: it comes back later"
    # Running has no deadline: a body that moves on leaves the heap.
    moved, _ = cache.observe(_body(7, created_ago=100, phase="Running", rv=2))
    queue.update(moved)
    assert len(queue) == 999
    assert queue.pop_due(now + 2 * RECHECK_SECONDS) == []
    # The others come due together 60 s after their creation.
    assert len(queue.pop_due(now + 61)) == 999


def test_every_body_change_is_noted_for_the_sweep() -> None:
    cache = RolloutCache()
    entry, _ = cache.observe(_body(1, created_ago=0))
    assert cache.touched == {"u1"}
    cache.touched.clear()
    cache.observe(_body(1, created_ago=0, phase="Running", rv=2))
    assert cache.touched == {"u1"}
    cache.forget("u1")
    assert cache.touched == set()


def _reported(coalescer: ProgressCoalescer, entry: Tracked, turns: int) -> None:
    asyncio.run(coalescer.report(entry, ProgressReport(turns=turns, context_tokens=10 * turns, generated_tokens=turns)))


def test_progress_is_answered_at_once_and_written_by_the_sweep_oldest_first() -> None:
    writes: list[tuple[str, dict[str, Any]]] = []

    async def write(entry: Tracked, status: api.SWERolloutStatus) -> None:
        writes.append((entry.name, status.to_patch()))

    coalescer = ProgressCoalescer(write, OperatorMetrics(), interval=3.0)
    cache = RolloutCache()
    entries = [cache.observe(_body(i, created_ago=0, phase="Running"))[0] for i in range(5)]
    for turns, entry in enumerate(entries, start=1):
        _reported(coalescer, entry, turns)
    assert writes == [], "the report does not wait for a status write"
    due = coalescer.take_due(2)
    assert [e.name for e in due] == ["r0", "r1"], "at most as many as may be written, oldest first"
    for entry in due:
        asyncio.run(coalescer.flush(entry))
    assert [(name, patch["progress"]["turns"]) for name, patch in writes] == [("r0", 1), ("r1", 2)]
    _reported(coalescer, entries[0], 9)
    assert [e.name for e in coalescer.take_due(10)] == ["r2", "r3", "r4"], "r0 was written under 3 s ago"
    entries[0].progress_written_at -= 3.0
    assert [e.name for e in coalescer.take_due(10)] == ["r0"]
