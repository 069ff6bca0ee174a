"""When a rollout has waited too long: the startup deadline and the keep-alive after an abort.

Both count from times stored in the object (creationTimestamp, partial.abortedAt),
so they survive operator restarts and hold whatever phase held the rollout up.
"""

from __future__ import annotations

from datetime import UTC, datetime

from swerollout.api.v1alpha1 import Phase

from .cache import Tracked


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def startup_overdue(entry: Tracked) -> bool:
    """Not running yet, and startupTimeoutSeconds have passed since the rollout was created
    (a pod never created, or never ready: the deadline is the same)."""
    if entry.phase not in (Phase.PENDING, Phase.STARTING):
        return False
    created = parse_time((entry.body.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return False
    timeout = int((entry.spec.get("sandbox") or {}).get("startupTimeoutSeconds", 600))
    return (utcnow() - created).total_seconds() >= timeout


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
        created = parse_time((entry.body.get("metadata") or {}).get("creationTimestamp"))
        timeout = int((entry.spec.get("sandbox") or {}).get("startupTimeoutSeconds", 600))
        return created.timestamp() + timeout if created is not None else None
    status = entry.rollout_status
    if entry.phase == Phase.ABORTED and not (status.sandbox is not None and status.sandbox.reclaimed_at):
        keep = int((entry.spec.get("sandbox") or {}).get("keepAliveSecondsAfterAbort", 1800))
        return status.partial.aborted_at.timestamp() + keep if status.partial is not None else None
    return None


def deadline_passed(entry: Tracked, now: float) -> bool:
    """Whether startup_overdue or keepalive_expired may hold (the sweep asks every second):
    the deadline is worked out once per body, so a sweep over thousands is a comparison each."""
    if entry.deadline is None or entry.deadline[0] is not entry.body:
        entry.deadline = (entry.body, _next_deadline(entry))
    at = entry.deadline[1]
    return at is not None and now >= at
