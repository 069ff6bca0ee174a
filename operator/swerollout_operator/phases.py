"""The rollout phase machine — the only place that decides phase transitions.

    Pending -> [Queued] -> Starting -> Running -> (Aborted <-> Resuming) -> Evaluating -> Succeeded | Failed
                                  +-> Prepared -> Running   (suspended before the first run: a warm start)
                              Running -(Retry: attempt lost)-> Resuming (replay from the checkpoint)

Queued is a wait for capacity (a ResourceQuota refuses the pod, no node can take it,
Kueue has not admitted it): entered from Pending or Starting, left for Starting once
the pod exists and is placed. `apply` keeps its clock (status.queue), so the startup
deadline can leave the wait out and queueTimeoutSeconds can bound it.

Handlers report *events* (the pod was created, the sandbox became ready, the
runner finished, ...); `apply` checks the transition against the table, and
returns the partial status it writes (API models, `to_patch()` sends only what is
set): the new phase, the conditions that change with it, and a message. An event that is not allowed in the current phase raises
IllegalTransition, which handlers treat as "already handled" (level-triggered
reconciles see the same event more than once).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import MESSAGE_LIMIT, ConditionStatus, ConditionType, Phase, QueueReason


class Trigger(str, Enum):
    POD_CREATED = "PodCreated"
    """The rollout pod exists (created now or adopted after a restart)."""
    SANDBOX_READY = "SandboxReady"
    """All containers of the pod are ready."""
    PREPARE = "Prepare"
    """All containers of the pod are ready and the rollout is suspended before its first run."""
    PREPARED = "Prepared"
    """The runner holds the first prompt's tokens and waits for the go."""
    PREPARED_RELEASED = "PreparedReleased"
    """A Prepared rollout's pod was released (preparedTimeoutSeconds) or lost."""
    START_REQUESTED = "StartRequested"
    """A Prepared rollout is no longer suspended and its pod is up: it runs."""
    RESTARTED = "Restarted"
    """A released Prepared rollout is no longer suspended: a fresh pod starts it."""
    STARTUP_FAILED = "StartupFailed"
    """The pod could not start (image pull, init container, a deadline)."""
    QUEUED = "WaitingForCapacity"
    """The pod waits for capacity: refused for quota, unschedulable, or gated by Kueue (reason: a QueueReason)."""
    DEQUEUED = "CapacityFound"
    """The queued rollout's pod was placed on a node (scheduled, admitted)."""
    ABORTED = "Aborted"
    """The runner stopped mid-run and uploaded a snapshot."""
    RESUME_REQUESTED = "ResumeRequested"
    """spec.suspend went back to false."""
    RESUMED = "Resumed"
    """The runner picked the resume assignment up."""
    POD_LOST = "PodLost"
    """The pod disappeared or failed while the rollout needed it."""
    RETRY = "Retry"
    """The infrastructure lost the attempt (its pod or node went, or the run ended on an
    infrastructure exit with nothing graded) and attempts remain: a fresh pod replays
    from the last per-turn checkpoint (retries.py decides what is retried)."""
    REPLAY_STARTED = "ReplayStarted"
    """A fresh pod replays the recorded actions after the old one was lost."""
    FINISHED = "Finished"
    """The runner uploaded the trajectory and an evaluation follows."""
    FINISHED_UNGRADED = "FinishedUngraded"
    """The runner uploaded the trajectory and no evaluation follows."""
    EVALUATED = "Evaluated"
    """The eval pod reported the reward."""
    FAILED = "Failed"
    """Anything that ends the rollout without a result."""


_T: dict[tuple[Phase, Trigger], Phase] = {
    (Phase.PENDING, Trigger.POD_CREATED): Phase.STARTING,
    (Phase.PENDING, Trigger.FAILED): Phase.FAILED,
    (Phase.PENDING, Trigger.STARTUP_FAILED): Phase.FAILED,
    (Phase.PENDING, Trigger.QUEUED): Phase.QUEUED,
    (Phase.STARTING, Trigger.QUEUED): Phase.QUEUED,
    # Another reason to wait (the pod is created at last, and now waits for a node).
    (Phase.QUEUED, Trigger.QUEUED): Phase.QUEUED,
    (Phase.QUEUED, Trigger.POD_CREATED): Phase.STARTING,
    (Phase.QUEUED, Trigger.DEQUEUED): Phase.STARTING,
    (Phase.QUEUED, Trigger.SANDBOX_READY): Phase.RUNNING,
    (Phase.QUEUED, Trigger.PREPARE): Phase.PREPARED,
    (Phase.QUEUED, Trigger.STARTUP_FAILED): Phase.FAILED,
    (Phase.QUEUED, Trigger.POD_LOST): Phase.FAILED,
    (Phase.QUEUED, Trigger.FAILED): Phase.FAILED,
    (Phase.STARTING, Trigger.SANDBOX_READY): Phase.RUNNING,
    (Phase.STARTING, Trigger.PREPARE): Phase.PREPARED,
    (Phase.PREPARED, Trigger.PREPARED): Phase.PREPARED,
    (Phase.PREPARED, Trigger.PREPARED_RELEASED): Phase.PREPARED,
    (Phase.PREPARED, Trigger.START_REQUESTED): Phase.RUNNING,
    (Phase.PREPARED, Trigger.RESTARTED): Phase.STARTING,
    (Phase.PREPARED, Trigger.FAILED): Phase.FAILED,
    (Phase.STARTING, Trigger.STARTUP_FAILED): Phase.FAILED,
    (Phase.STARTING, Trigger.POD_LOST): Phase.FAILED,
    (Phase.STARTING, Trigger.FAILED): Phase.FAILED,
    (Phase.RUNNING, Trigger.ABORTED): Phase.ABORTED,
    (Phase.RUNNING, Trigger.FINISHED): Phase.EVALUATING,
    (Phase.RUNNING, Trigger.FINISHED_UNGRADED): Phase.SUCCEEDED,
    (Phase.RUNNING, Trigger.POD_LOST): Phase.FAILED,
    (Phase.RUNNING, Trigger.RETRY): Phase.RESUMING,
    (Phase.RUNNING, Trigger.FAILED): Phase.FAILED,
    (Phase.ABORTED, Trigger.RESUME_REQUESTED): Phase.RESUMING,
    # The runner is told to resume as soon as the rollout is no longer suspended
    # (assignments.py), so its report may come before the pass that records Resuming.
    (Phase.ABORTED, Trigger.RESUMED): Phase.RUNNING,
    (Phase.ABORTED, Trigger.POD_LOST): Phase.ABORTED,
    (Phase.ABORTED, Trigger.FAILED): Phase.FAILED,
    (Phase.RESUMING, Trigger.RESUMED): Phase.RUNNING,
    (Phase.RESUMING, Trigger.REPLAY_STARTED): Phase.RESUMING,
    (Phase.RESUMING, Trigger.ABORTED): Phase.ABORTED,
    (Phase.RESUMING, Trigger.POD_LOST): Phase.RESUMING,
    (Phase.RESUMING, Trigger.FINISHED): Phase.EVALUATING,
    (Phase.RESUMING, Trigger.FINISHED_UNGRADED): Phase.SUCCEEDED,
    (Phase.RESUMING, Trigger.FAILED): Phase.FAILED,
    (Phase.EVALUATING, Trigger.EVALUATED): Phase.SUCCEEDED,
    # An autosubmission after an infrastructure exit that could not be graded (retries.py).
    (Phase.EVALUATING, Trigger.RETRY): Phase.RESUMING,
    (Phase.EVALUATING, Trigger.FAILED): Phase.FAILED,
}

# Conditions that each phase implies; None = leave that condition as it is.
_CONDITIONS: dict[Phase, dict[ConditionType, ConditionStatus | None]] = {
    Phase.PENDING: {ConditionType.SANDBOX_READY: ConditionStatus.FALSE},
    Phase.QUEUED: {ConditionType.SANDBOX_READY: ConditionStatus.FALSE},
    Phase.STARTING: {ConditionType.SANDBOX_READY: ConditionStatus.FALSE},
    Phase.PREPARED: {ConditionType.GENERATING: ConditionStatus.FALSE},
    Phase.RUNNING: {
        ConditionType.SANDBOX_READY: ConditionStatus.TRUE,
        ConditionType.GENERATING: ConditionStatus.TRUE,
        ConditionType.SUSPENDED: ConditionStatus.FALSE,
    },
    Phase.ABORTED: {ConditionType.GENERATING: ConditionStatus.FALSE, ConditionType.SUSPENDED: ConditionStatus.TRUE},
    Phase.RESUMING: {ConditionType.SUSPENDED: ConditionStatus.FALSE},
    Phase.EVALUATING: {ConditionType.GENERATING: ConditionStatus.FALSE, ConditionType.EVALUATED: ConditionStatus.FALSE},
    Phase.SUCCEEDED: {
        ConditionType.GENERATING: ConditionStatus.FALSE,
        ConditionType.EVALUATED: ConditionStatus.TRUE,
        ConditionType.COMPLETE: ConditionStatus.TRUE,
    },
    Phase.FAILED: {ConditionType.GENERATING: ConditionStatus.FALSE, ConditionType.COMPLETE: ConditionStatus.TRUE},
}


# Conditions that a trigger sets besides its phase's (Prepared says how far a Prepared
# rollout got, which its phase alone does not).
_TRIGGER_CONDITIONS: dict[Trigger, dict[ConditionType, ConditionStatus]] = {
    Trigger.PREPARE: {ConditionType.SANDBOX_READY: ConditionStatus.TRUE, ConditionType.PREPARED: ConditionStatus.FALSE},
    Trigger.PREPARED: {ConditionType.PREPARED: ConditionStatus.TRUE},
    Trigger.PREPARED_RELEASED: {
        ConditionType.SANDBOX_READY: ConditionStatus.FALSE,
        ConditionType.PREPARED: ConditionStatus.FALSE,
    },
    Trigger.START_REQUESTED: {ConditionType.PREPARED: ConditionStatus.FALSE},
    Trigger.RESTARTED: {ConditionType.PREPARED: ConditionStatus.FALSE},
}


class IllegalTransition(Exception):
    def __init__(self, phase: Phase, event: Trigger) -> None:
        super().__init__(f"event {event.value} is not allowed in phase {phase.value}")
        self.phase = phase
        self.event = event


def next_phase(phase: Phase, event: Trigger) -> Phase:
    try:
        return _T[(phase, event)]
    except KeyError:
        raise IllegalTransition(phase, event) from None


def allowed(phase: Phase, event: Trigger) -> bool:
    return (phase, event) in _T


def lost_attempt(phase: Phase, *, attempts_left: bool) -> Trigger:
    """What losing the attempt's pod means in ``phase``: (Running, PodLost) is a replay
    from the last checkpoint (RETRY) while attempts remain, else POD_LOST (which fails a
    Running rollout, and leaves an Aborted or Resuming one to replay when resumed)."""
    return Trigger.RETRY if attempts_left and allowed(phase, Trigger.RETRY) else Trigger.POD_LOST


def cut_message(message: str) -> str:
    """A message within the CRD's bound: the API server refuses a longer one, and with it
    the whole status write. The head is kept (it says what happened); the cut is marked."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    return message[: MESSAGE_LIMIT - 1] + "\u2026"


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def set_condition(
    conditions: list[api.Condition],
    ctype: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    at: datetime,
) -> list[api.Condition]:
    """Conditions with one entry set; lastTransitionTime moves only when the status changes."""
    key = ctype.value
    out = [c for c in conditions if c.type != key]
    old = next((c for c in conditions if c.type == key), None)
    entry = api.Condition(
        type=key,
        status=status,
        reason=reason,
        message=cut_message(message),
        last_transition_time=old.last_transition_time if old is not None and old.status == status else at,
    )
    if generation is not None:
        entry.observed_generation = generation
    out.append(entry)
    return sorted(out, key=lambda c: c.type)


@dataclass(frozen=True)
class Transition:
    old: Phase
    new: Phase
    event: Trigger
    status: api.SWERolloutStatus
    """The partial status the transition writes: only its set fields go into the patch."""

    @property
    def status_patch(self) -> dict[str, Any]:
        return self.status.to_patch()


def merged(base: api.SWERolloutStatus, extra: api.SWERolloutStatus | None) -> api.SWERolloutStatus:
    """`base` with the fields set in `extra` set over it (a partial status on a partial status)."""
    if extra is None:
        return base
    out = base.model_copy()
    for name in extra.model_fields_set:
        setattr(out, name, getattr(extra, name))
    return out


def apply(
    status: api.SWERolloutStatus | None,
    event: Trigger,
    *,
    reason: str,
    message: str,
    generation: int | None,
    extra: api.SWERolloutStatus | None = None,
) -> Transition:
    """The partial status for `event`; raises IllegalTransition when it does not apply."""
    status = status if status is not None else api.SWERolloutStatus()
    message = cut_message(message)
    old = status.phase
    new = next_phase(old, event)
    at = now()
    conditions = list(status.conditions)
    for ctype, cstatus in {**_CONDITIONS[new], **_TRIGGER_CONDITIONS.get(event, {})}.items():
        if cstatus is not None:
            conditions = set_condition(conditions, ctype, cstatus, reason, message, generation, at)
    patch = api.SWERolloutStatus(phase=new, conditions=conditions, message=message)
    if generation is not None:
        patch.observed_generation = generation
    if new in (Phase.SUCCEEDED, Phase.FAILED) and status.completion_time is None:
        patch.completion_time = at
    if old == Phase.PENDING and status.start_time is None:
        patch.start_time = at
    queue = _queue_clock(status.queue or api.QueueState(), old, new, reason, at)
    if queue is not None:
        patch.queue = queue
    return Transition(old=old, new=new, event=event, status=merged(patch, extra))


def _queue_clock(queue: api.QueueState, old: Phase, new: Phase, reason: str, at: datetime) -> api.QueueState | None:
    """status.queue's patch for a transition: a wait starts when Queued is entered and is
    added to waitedSeconds when it is left (the startup deadline leaves that time out)."""
    if new == Phase.QUEUED:
        why = QueueReason(reason)  # a Queued transition always says which wait
        return api.QueueState(reason=why) if old == Phase.QUEUED else api.QueueState(reason=why, queued_at=at)
    if old != Phase.QUEUED:
        return None
    since = queue.queued_at
    waited = queue.waited_seconds + (max(0, int((at - since).total_seconds())) if since is not None else 0)
    return api.QueueState(reason=None, queued_at=None, waited_seconds=waited)
