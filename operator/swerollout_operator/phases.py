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

The machine has two sides that talk to the runner, pure decisions like `apply` (they read
nothing but their arguments and write nothing; the reconciler applies what they return):

- `assignment_for`: what a runner should be doing, from the rollout and the pod asking;
- `decide`: what a runner's report does to its rollout (at most one `Trigger`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import (
    MESSAGE_LIMIT,
    ConditionStatus,
    ConditionType,
    Phase,
    QueueReason,
    SWERolloutBatchSpec,
    is_suspended,
    weight_version,
)
from swerollout.exit_status import ExitStatus, base_exit, gate_exit_status, is_failed_run, is_truncated
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import (
    Abort,
    Assignment,
    AssignmentKind,
    Eval,
    ObjectKind,
    Prepare,
    ProgressReport,
    Resume,
    Run,
    RunnerEvent,
    Stop,
    StoredObjectRef,
    Wait,
)

from . import retries
from .cache import Tracked


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
    # (phases.assignment_for), so its report may come before the pass that records Resuming.
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


# -- what a runner should be doing -------------------------------------------------------
#
# What a runner should be doing, as a pure function of the rollout and the pod asking.
#
# The answer is level-triggered: it depends only on the rollout's spec and status and
# on which pod asks (role and attempt), never on what was answered before, so a
# runner that reconnects — or an operator that restarted — gets the same answer.
# Assignment ids change exactly when the work changes; a runner acts once per id.
#
# Decisions read the typed spec and status (the API models); the spec a runner is sent
# is the stored one, as the API server holds it (`Tracked.wire_spec`), with the batch's
# weight version when it sets one.


def _ref(kind: ObjectKind, ref: api.ObjectRef) -> StoredObjectRef:
    return StoredObjectRef(kind=kind, sha256=ref.sha256, bytes=ref.bytes, ref=ref.ref)


def assignment_for(
    entry: Tracked,
    *,
    role: str,
    attempt: int,
    batch: SWERolloutBatchSpec | None = None,
    batch_generation: int = 0,
) -> Assignment:
    """`batch`: the spec of the rollout's SWERolloutBatch, if it has one (and its generation)."""
    try:
        spec = entry.rollout_spec
    except ValidationError:
        # Its next pass fails the rollout InvalidSpec (and its runner is told to stop then).
        return Wait(id="wait:invalid", attempt=attempt)
    status = entry.rollout_status
    wire_spec = _with_batch(entry.wire_spec, spec, batch)
    phase = status.phase
    current_attempt = status.attempts or 1
    generation = entry.generation or 1

    if role == "eval":
        evaluation = status.evaluation or api.EvaluationState()
        result = status.result
        if phase == Phase.EVALUATING and evaluation.attempt == attempt and result is not None and result.patch:
            return Eval(
                id=f"eval:{attempt}",
                attempt=attempt,
                spec=wire_spec,
                patch=_ref(ObjectKind.PATCH, result.patch),
                exit_status=result.exit_status,
            )
        if phase == Phase.EVALUATING:
            # Another attempt's pod (or, never with the phase machine's FINISHED, no patch).
            return Wait(id="wait", attempt=attempt)
        if not phase.is_terminal and spec.reward.prewarm:
            # A prewarmed eval pod, ready before the patch: it waits for Evaluating.
            return Wait(id="wait", attempt=attempt)
        return Stop(id="stop", attempt=attempt)

    if attempt < current_attempt or phase.is_terminal or phase == Phase.EVALUATING:
        return Stop(id="stop", attempt=attempt)
    if attempt > current_attempt:
        # A pod from the future cannot exist; wait for the status to catch up.
        return Wait(id="wait", attempt=attempt)

    partial = status.partial
    reclaimed = status.sandbox is not None and status.sandbox.reclaimed_at is not None
    suspend = is_suspended(spec.suspend, batch)
    # An abort's id changes with every new suspension, the rollout's own or its batch's
    # (a runner acts once per id, and a resumed run must hear the next abort).
    abort_id = f"abort:{attempt}:{generation}" + (
        f":b{batch_generation}" if batch is not None and batch.suspend else ""
    )
    if phase in (Phase.PENDING, Phase.QUEUED, Phase.STARTING):
        return Wait(id="wait", attempt=attempt)
    if phase == Phase.PREPARED:
        if reclaimed:
            # Released: this pod is going; the pass starts a fresh one on the resume.
            return Stop(id="stop", attempt=attempt)
        if suspend:
            return Prepare(id=f"prepare:{attempt}", attempt=attempt, spec=wire_spec)
        # The go, answered in memory as the resume arrives (before the pass that records
        # Running), with the id Running answers, so the runner acts on it once.
        return Run(id=f"run:{attempt}", attempt=attempt, spec=wire_spec)
    if phase == Phase.RUNNING:
        if suspend:
            return Abort(id=abort_id, attempt=attempt)
        if partial is not None or status.replay:
            # Running again after a resume or a replay: keep answering the resume it picked up.
            return _resume(wire_spec, partial, attempt, replay=status.replay)
        return Run(id=f"run:{attempt}", attempt=attempt, spec=wire_spec)
    if phase == Phase.RESUMING:
        if suspend:
            return Abort(id=abort_id, attempt=attempt)
        return _resume(wire_spec, partial, attempt, replay=status.replay)
    # Aborted and no longer suspended (a resume, of the batch or the rollout): the runner on
    # the live pod resumes at once, answered in memory like an abort, before the pass that
    # records Resuming; the resume's id is the one Resuming answers, so it is acted on once.
    # A reclaimed pod has no runner to tell: the pass replays into a fresh one.
    if not suspend and partial is not None and not reclaimed:
        return _resume(wire_spec, partial, attempt, replay=status.replay)
    # Aborted: keep the sandbox, do nothing until resumed.
    return Wait(id=f"wait:aborted:{_stamp(partial)}", attempt=attempt)


def _stamp(partial: api.Partial | None) -> str:
    """partial.abortedAt as the operator writes it (the ids name it)."""
    if partial is None:
        return ""
    return partial.aborted_at.isoformat().replace("+00:00", "Z")


def _with_batch(wire: dict[str, Any], spec: api.SWERolloutSpec, batch: SWERolloutBatchSpec | None) -> dict[str, Any]:
    """The spec a runner works to: the batch's weight version, when it sets one, wins."""
    own = spec.inference.weight_version
    version = weight_version(own, batch)
    if version == own:
        return wire
    return {**wire, "inference": {**(wire.get("inference") or {}), "weightVersion": version}}


def _resume(spec: dict[str, Any], partial: api.Partial | None, attempt: int, *, replay: bool) -> Run | Resume:
    """A resume from the snapshot; with none (a pod lost before its first checkpoint), a run
    from the start in the fresh pod, under the id a resume has."""
    at = f"resume:{attempt}:{_stamp(partial)}"
    if partial is None:
        return Run(id=at, attempt=attempt, spec=spec, replay=replay)
    return Resume(
        id=at, attempt=attempt, spec=spec, snapshot=_ref(ObjectKind.SNAPSHOT, partial.snapshot), replay=replay
    )


# -- what a runner's report does ---------------------------------------------------------
#
# What a runner's report (ingest API) does to its rollout, as a pure decision.
#
# `decide(status, spec, event, ...)` returns a `Decision`: at most one phase-machine
# event (so a repeated report is refused by the machine, not applied twice), the
# partial status written with it, and the Event or notice that goes with it. It reads
# nothing but its arguments and writes nothing; the reconciler applies it
# (`Reconciler.on_runner_event`), as it applies `phases.apply`. The status it carries is
# built from the API models with the report's own numbers.


# The Event reason of a run that ended on an infrastructure exit (no reward to give).
FAILURE_REASONS = {
    ExitStatus.EXIT_API.value: "InferenceFailed",
    ExitStatus.EXIT_ENVIRONMENT_ERROR.value: "SandboxFailed",
    ExitStatus.EXIT_ERROR.value: "RunnerError",
}


def failure_reason(exit_status: str) -> str:
    return FAILURE_REASONS.get(base_exit(exit_status), "RunnerError")


def object_ref(ref: StoredObjectRef) -> api.ObjectRef:
    return api.ObjectRef(ref=ref.ref, sha256=ref.sha256, bytes=ref.bytes)


@dataclass(frozen=True)
class Decision:
    """What one report does. `trigger` None: no transition (a duplicate, or a report
    that only says something), and `status`, if any, is written alone."""

    trigger: Trigger | None = None
    reason: str = ""
    message: str = ""
    status: api.SWERolloutStatus | None = None
    """The partial status written with the transition (its `extra`), or alone."""
    warning: bool = False
    notice: str = ""
    """A runner's notice, posted as a Warning Event (reason `notice_reason`)."""
    notice_reason: str = ""

    @property
    def retry(self) -> bool:
        """A replay from the last checkpoint (Reconciler.retry; `message` is its cause)."""
        return self.trigger is Trigger.RETRY


NOTHING = Decision()


@dataclass(frozen=True)
class Context:
    """What a decision needs beyond status, spec and report, read by the reconciler."""

    told: Assignment
    """What the runner of the current attempt is told now (phases.assignment_for)."""
    progress: ProgressReport | None
    """The runner's last progress report (in memory, maybe not written yet)."""
    attempts_left: bool
    """Another pod may still be started (retries.attempts_left)."""
    at: datetime
    """Now, to the second (the times the status records)."""


def log_status(phase: api.Phase, log: StoredObjectRef) -> api.SWERolloutStatus:
    """status.logs for a report's log ref: kept in the store so that `swerollout logs`
    still has it once the pod is deleted."""
    role = "eval" if phase == api.Phase.EVALUATING else "runner"
    return api.SWERolloutStatus(logs=api.ContainerLogs.model_validate({role: object_ref(log)}))


def decide(status: api.SWERolloutStatus, spec: api.SWERolloutSpec, event: RunnerEvent, ctx: Context) -> Decision:
    match event:
        case wire.Started():
            return _started(status, event, ctx)
        case wire.Prepared():
            return _prepared(status, event, ctx)
        case wire.Aborted():
            return _aborted(event, ctx)
        case wire.Finished():
            return _finished(status, spec, event, ctx)
        case wire.Evaluated():
            return _evaluated(status, event, ctx)
        case wire.Failed():
            return Decision(
                Trigger.FAILED,
                reason=event.reason or "RunnerFailed",
                message=event.message or "the runner failed",
                warning=True,
            )


def _to_s(at: datetime) -> datetime:
    return at.replace(microsecond=0)


def _to_ms(at: datetime) -> datetime:
    """Milliseconds kept: finish -> reward is measured from these two, and is often under a second."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _final_progress(event: wire.Aborted | wire.Finished, ctx: Context) -> api.Progress:
    """Progress as of the event that ends a run (written with it, so they agree)."""
    last = ctx.progress
    return api.Progress(
        turns=event.turns,
        tokens=event.context_tokens,
        generated_tokens=last.generated_tokens if last else 0,
        inference_aborts=last.inference_aborts if last else 0,
        updated_at=_to_s(ctx.at),
    )


def _started(status: api.SWERolloutStatus, event: wire.Started, ctx: Context) -> Decision:
    # A runner notice: what it found out about the inference server (a smaller context
    # than the spec asked, routing rows the server cannot return).
    notice = event.message.strip()
    why = event.reason or "RunnerNotice"
    # An Aborted rollout's runner that started the resume it is answered now (it no longer
    # is suspended) took it before the pass that records Resuming. Any other report of a
    # start (a late copy of the run's own) leaves the rollout Aborted.
    took = ctx.told.id == event.assignment_id
    if status.phase == api.Phase.RESUMING or (
        status.phase == api.Phase.ABORTED and took and ctx.told.kind == AssignmentKind.RESUME
    ):
        message = "the runner resumed from the snapshot" + (f"; {notice}" if notice else "")
        return Decision(Trigger.RESUMED, reason="Resumed", message=message, notice=notice, notice_reason=why)
    if status.phase == api.Phase.PREPARED and took and ctx.told.kind == AssignmentKind.RUN:
        # A prepared batch's go: its runner's start records Running (Reconciler.observe_batch).
        message = "the runner started from prepared" + (f"; {notice}" if notice else "")
        return Decision(Trigger.START_REQUESTED, reason="Started", message=message, notice=notice, notice_reason=why)
    if notice and status.phase == api.Phase.RUNNING:
        return Decision(status=api.SWERolloutStatus(message=cut_message(notice)), notice=notice, notice_reason=why)
    return Decision(notice=notice, notice_reason=why)


def _prepared(status: api.SWERolloutStatus, event: wire.Prepared, ctx: Context) -> Decision:
    """The runner of the current attempt holds the first prompt (a late report of an older
    attempt, or one after the go, no longer applies)."""
    if status.prepared is None or ctx.told.id != event.assignment_id:
        return NOTHING
    state = api.PreparedState(since=status.prepared.since, prepared_at=_to_s(ctx.at))
    state.prompt_tokens = event.context_tokens
    return Decision(
        Trigger.PREPARED,
        reason="Prepared",
        message=f"prepared: {event.context_tokens} prompt tokens; the first /generate goes out on resume",
        status=api.SWERolloutStatus(prepared=state),
    )


def _aborted(event: wire.Aborted, ctx: Context) -> Decision:
    reason = event.reason or "Suspended"
    partial = api.Partial(
        snapshot=object_ref(event.snapshot),
        turns=event.turns,
        tokens=event.context_tokens,
        aborted_at=_to_s(ctx.at),
        reason=reason,
    )
    if event.weight_version:
        partial.weight_version = event.weight_version
    # spec is the user's: an abort that meets `suspend: false` (a resume that overtook
    # it) is resumed by the next pass, never turned into a suspension.
    return Decision(
        Trigger.ABORTED,
        reason=reason,
        message=event.message or f"aborted after {event.turns} turns; snapshot kept",
        status=api.SWERolloutStatus(partial=partial, replay=False, progress=_final_progress(event, ctx)),
    )


def _finished(status: api.SWERolloutStatus, spec: api.SWERolloutSpec, event: wire.Finished, ctx: Context) -> Decision:
    exit_status = event.exit_status
    result = api.Result(
        exit_status=exit_status,
        turns=event.turns,
        prompt_tokens=event.prompt_tokens,
        response_tokens=event.response_tokens,
        sampled_tokens=event.sampled_tokens,
        dropped_tokens=event.dropped_tokens,
        truncated=is_truncated(exit_status),
        has_patch=event.patch is not None and event.patch.bytes > 0,
        finished_at=_to_ms(ctx.at),
        trajectory=object_ref(event.trajectory),
    )
    if event.patch:
        result.patch = object_ref(event.patch)
    written = api.SWERolloutStatus(result=result, progress=_final_progress(event, ctx))
    decision = gate_exit_status(exit_status, spec.mode)
    graded = spec.reward.enabled and decision.evaluate and result.has_patch
    if is_failed_run(exit_status, graded):
        # The infrastructure ended this run, not the policy, and nothing will be
        # graded: replayed from the last checkpoint while attempts remain (retries.py),
        # else the rollout fails, naming the cause (the trajectory is kept).
        cause = event.message.strip() or "the runner gave no detail"
        retried = retries.is_retried_exit(exit_status, graded) and ctx.attempts_left
        if retried and allowed(status.phase, Trigger.RETRY):
            return Decision(Trigger.RETRY, reason=failure_reason(exit_status), message=f"{exit_status}: {cause}"[:2048])
        return Decision(
            Trigger.FAILED,
            reason=failure_reason(exit_status),
            message=f"{exit_status}: {cause}"[:4096],
            status=written,
            warning=True,
        )
    if not spec.reward.enabled:
        return Decision(
            Trigger.FINISHED_UNGRADED, reason="Finished", message=f"{exit_status}; reward disabled", status=written
        )
    if not decision.evaluate or not result.has_patch:
        why = decision.reason if not decision.evaluate else "no patch to evaluate"
        reward = api.RewardStatus(value=0.0, resolved=False, graded=False, message=why[:1024])
        return Decision(
            Trigger.FINISHED_UNGRADED,
            reason="NotGraded",
            message=f"{exit_status}: {why}",
            status=merged(written, api.SWERolloutStatus(reward=reward)),
        )
    # The next pass deletes the policy's pod (the eval pod never sees it) and makes the eval pod.
    return Decision(
        Trigger.FINISHED,
        reason="Finished",
        message=f"{exit_status}; evaluating the patch in a fresh pod",
        status=merged(written, api.SWERolloutStatus(evaluation=retries.next_evaluation(status))),
    )


def _evaluated(status: api.SWERolloutStatus, event: wire.Evaluated, ctx: Context) -> Decision:
    report = event.reward
    reward = api.RewardStatus(
        value=report.reward,
        resolved=report.resolved,
        graded=report.graded,
        fail_to_pass_passed=report.fail_to_pass_passed,
        fail_to_pass_total=report.fail_to_pass_total,
        pass_to_pass_passed=report.pass_to_pass_passed,
        pass_to_pass_total=report.pass_to_pass_total,
        message=report.message[:1024],
        tests_seconds=report.tests_seconds,
        graded_at=_to_ms(ctx.at),
    )
    if event.report:
        reward.report = object_ref(event.report)
    exit_status = status.result.exit_status if status.result is not None else ""
    if is_failed_run(exit_status, report.graded):
        # An autosubmission after an infrastructure exit that could not be graded either:
        # nothing to show for the run, so replayed like any infrastructure exit (retries.py).
        cause = f"{exit_status}, and the autosubmitted patch could not be graded: {report.message}"
        if retries.is_retried_exit(exit_status, report.graded) and ctx.attempts_left:
            return Decision(Trigger.RETRY, reason=failure_reason(exit_status), message=cause[:2048])
        return Decision(
            Trigger.FAILED,
            reason=failure_reason(exit_status),
            message=cause[:4096],
            status=api.SWERolloutStatus(reward=reward),
            warning=True,
        )
    return Decision(
        Trigger.EVALUATED,
        reason="Evaluated",
        message=f"reward {report.reward} ({'resolved' if report.resolved else 'not resolved'})",
        status=api.SWERolloutStatus(reward=reward),
    )
