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

from swerollout.api.v1alpha1 import Phase

from .cache import Tracked


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _startup_deadline(entry: Tracked) -> float | None:
    """startupTimeoutSeconds from the rollout's creation, or from the fresh pod's start after
    its prepared pod was released (a prepared rollout may wait hours for its go)."""
    started = parse_time((entry.body.get("metadata") or {}).get("creationTimestamp"))
    restarted = ((entry.body.get("status") or {}).get("prepared") or {}).get("restartedAt")
    if restarted:
        started = parse_time(restarted)
    if started is None:
        return None
    timeout = int((entry.spec.get("sandbox") or {}).get("startupTimeoutSeconds", 600))
    # The time it waited Queued for capacity does not count.
    waited = int(((entry.status.get("queue") or {}).get("waitedSeconds")) or 0)
    return started.timestamp() + timeout + waited


def _queue_deadline(entry: Tracked) -> float | None:
    """Epoch seconds at which a Queued rollout has waited queueTimeoutSeconds over all its
    waits; None without a limit (the default)."""
    timeout = (entry.spec.get("sandbox") or {}).get("queueTimeoutSeconds")
    queue = entry.status.get("queue") or {}
    since = parse_time(queue.get("queuedAt"))
    if timeout is None or since is None:
        return None
    return since.timestamp() + int(timeout) - int(queue.get("waitedSeconds") or 0)


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
    if status.prepared is None or status.prepared.released_at or (status.sandbox and status.sandbox.reclaimed_at):
        return None
    keep = int((entry.spec.get("sandbox") or {}).get("preparedTimeoutSeconds", 1800))
    return status.prepared.since.timestamp() + keep


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
    if status.partial is None:
        return False
    aborted_at = status.partial.aborted_at
    keep = int((entry.spec.get("sandbox") or {}).get("keepAliveSecondsAfterAbort", 1800))
    return (utcnow() - aborted_at).total_seconds() >= keep


def _next_deadline(entry: Tracked) -> float | None:
    if entry.phase in (Phase.PENDING, Phase.STARTING):
        return _startup_deadline(entry)
    if entry.phase == Phase.QUEUED:
        return _queue_deadline(entry)
    if entry.phase == Phase.PREPARED:
        return _prepared_deadline(entry)
    status = entry.rollout_status
    if entry.phase == Phase.ABORTED and not (status.sandbox is not None and status.sandbox.reclaimed_at):
        keep = int((entry.spec.get("sandbox") or {}).get("keepAliveSecondsAfterAbort", 1800))
        return status.partial.aborted_at.timestamp() + keep if status.partial is not None else None
    return None


def deadline_of(entry: Tracked) -> float | None:
    """The rollout's next deadline (epoch seconds), worked out once per body."""
    if entry.deadline is None or entry.deadline[0] is not entry.body:
        entry.deadline = (entry.body, _next_deadline(entry))
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
