"""When a rollout has waited too long: the startup deadline, the queue limit, the keep-alive
after an abort, and the hold of a Prepared rollout's pod.

All count from times stored in the object (creationTimestamp, status.queue, partial.abortedAt,
prepared.since and prepared.restartedAt), so they survive operator restarts. The startup
deadline holds whatever held the rollout up except a wait for capacity (phase Queued), which
only queueTimeoutSeconds bounds.
"""

from __future__ import annotations

import heapq
from datetime import UTC, datetime

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase

from .cache import Tracked


def utcnow() -> datetime:
    return datetime.now(UTC)


def _sandbox(entry: Tracked) -> api.SandboxSpec | None:
    """spec.sandbox as the API model; None for a spec the model refuses (the next pass
    fails such a rollout InvalidSpec, so no deadline of it matters)."""
    try:
        return entry.rollout_spec.sandbox
    except ValidationError:
        return None


def _startup_deadline(entry: Tracked) -> float | None:
    """startupTimeoutSeconds from the rollout's creation, or from the fresh pod's start after
    its prepared pod was released (a prepared rollout may wait hours for its go)."""
    sandbox = _sandbox(entry)
    status = entry.rollout_status
    restarted = status.prepared.restarted_at if status.prepared is not None else None
    started = restarted or entry.created_at
    if started is None or sandbox is None:
        return None
    # The time it waited Queued for capacity does not count.
    waited = status.queue.waited_seconds if status.queue is not None else 0
    return started.timestamp() + sandbox.startup_timeout_seconds + waited


def _queue_deadline(entry: Tracked) -> float | None:
    """Epoch seconds at which a Queued rollout has waited queueTimeoutSeconds over all its
    waits; None without a limit (the default)."""
    sandbox = _sandbox(entry)
    queue = entry.rollout_status.queue
    if sandbox is None or sandbox.queue_timeout_seconds is None or queue is None or queue.queued_at is None:
        return None
    return queue.queued_at.timestamp() + sandbox.queue_timeout_seconds - queue.waited_seconds


def startup_overdue(entry: Tracked) -> bool:
    """Not running yet, and startupTimeoutSeconds have passed since the rollout was created,
    time spent Queued left out (a pod never created, or never ready: the deadline is the same)."""
    if entry.phase not in (Phase.PENDING, Phase.STARTING):
        return False
    deadline = _startup_deadline(entry)
    return deadline is not None and utcnow().timestamp() >= deadline


def queue_overdue(entry: Tracked) -> bool:
    """Queued, and its waits add up to spec.sandbox.queueTimeoutSeconds."""
    if entry.phase != Phase.QUEUED:
        return False
    deadline = _queue_deadline(entry)
    return deadline is not None and utcnow().timestamp() >= deadline


def _prepared_deadline(entry: Tracked) -> float | None:
    status = entry.rollout_status
    sandbox = _sandbox(entry)
    if status.prepared is None or status.prepared.released_at or (status.sandbox and status.sandbox.reclaimed_at):
        return None
    if sandbox is None:
        return None
    return status.prepared.since.timestamp() + sandbox.prepared_timeout_seconds


def prepared_expired(entry: Tracked) -> bool:
    """Prepared, its pod still held, and preparedTimeoutSeconds have passed since it became so."""
    if entry.phase != Phase.PREPARED:
        return False
    deadline = _prepared_deadline(entry)
    return deadline is not None and utcnow().timestamp() >= deadline


def keepalive_expired(entry: Tracked) -> bool:
    """Aborted, its pod still held, and keepAliveSecondsAfterAbort have passed."""
    if entry.phase != Phase.ABORTED:
        return False
    status = entry.rollout_status
    if status.sandbox is not None and status.sandbox.reclaimed_at:
        return False
    sandbox = _sandbox(entry)
    if status.partial is None or sandbox is None:
        return False
    return (utcnow() - status.partial.aborted_at).total_seconds() >= sandbox.keep_alive_seconds_after_abort


def _next_deadline(entry: Tracked) -> float | None:
    if entry.phase in (Phase.PENDING, Phase.STARTING):
        return _startup_deadline(entry)
    if entry.phase == Phase.QUEUED:
        return _queue_deadline(entry)
    if entry.phase == Phase.PREPARED:
        return _prepared_deadline(entry)
    status = entry.rollout_status
    if entry.phase == Phase.ABORTED and not (status.sandbox is not None and status.sandbox.reclaimed_at):
        sandbox = _sandbox(entry)
        if status.partial is None or sandbox is None:
            return None
        return status.partial.aborted_at.timestamp() + sandbox.keep_alive_seconds_after_abort
    return None


def deadline_of(entry: Tracked) -> float | None:
    """The rollout's next deadline (epoch seconds), worked out once per body."""
    if entry.deadline is None or entry.deadline[0] is not entry.revision:
        entry.deadline = (entry.revision, _next_deadline(entry))
    return entry.deadline[1]


def deadline_passed(entry: Tracked, now: float) -> bool:
    """Whether startup_overdue, queue_overdue, prepared_expired or keepalive_expired may hold."""
    at = deadline_of(entry)
    return at is not None and now >= at


RECHECK_SECONDS = 5.0
"""A deadline that fired and whose pass left the body as it was (a failed write is retried
by the work queue; this is the safety net) fires again this much later."""


class DeadlineQueue:
    """Every tracked rollout's next deadline in a heap, so the once-a-second sweep costs
    O(rollouts due + bodies changed), not a look at each of 20,000 rollouts."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._at: dict[str, float] = {}
        """uid -> its deadline in the heap now (older heap items for it are stale)."""

    def __len__(self) -> int:
        return len(self._at)

    def update(self, entry: Tracked) -> None:
        """Its body changed: (re)schedule its next deadline, if it has one."""
        at = deadline_of(entry)
        if at is None:
            self._at.pop(entry.uid, None)
        elif self._at.get(entry.uid) != at:
            self._at[entry.uid] = at
            heapq.heappush(self._heap, (at, entry.uid))

    def forget(self, uid: str) -> None:
        self._at.pop(uid, None)

    def pop_due(self, now: float) -> list[str]:
        """The uids whose deadline has passed; each comes again RECHECK_SECONDS later unless
        its body changes first (update)."""
        due: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            at, uid = heapq.heappop(self._heap)
            if self._at.get(uid) == at:
                due.append(uid)
        for uid in due:
            self._at[uid] = now + RECHECK_SECONDS
            heapq.heappush(self._heap, (now + RECHECK_SECONDS, uid))
        return due
