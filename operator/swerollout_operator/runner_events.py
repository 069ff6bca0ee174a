"""What a runner's report (ingest API) does to its rollout.

Every report is one phase-machine event, so a repeated report is refused by the
machine, not applied twice. The status it writes is built from the API models,
with the report's own numbers (no field-by-field copies of spellings).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from swerollout.api import v1alpha1 as api
from swerollout.exit_status import ExitStatus, base_exit, gate_exit_status, is_failed_run
from swerollout.wire.ingest import AssignmentKind, EventKind, RunnerEvent, StoredObjectRef

from . import retries
from .deadlines import utcnow
from .metrics import abort_reason_label
from .phases import Trigger, allowed, cut_message, merged
from .progress import ProgressCoalescer

if TYPE_CHECKING:
    from swerollout.wire.ingest import Assignment

    from .cache import Tracked
    from .metrics import OperatorMetrics


class Transitions(Protocol):
    """The reconciler's phase-machine step and its Events: what every module below it that
    moves a rollout's phase (this one, warm.py) calls back into."""

    def post_event(self, entry: Tracked, *, reason: str, message: str, warning: bool = False) -> None: ...

    async def transition(
        self,
        entry: Tracked,
        event: Trigger,
        *,
        reason: str,
        message: str,
        extra: api.SWERolloutStatus | None = None,
        warning: bool = False,
    ) -> bool: ...


class Reconciler(Transitions, Protocol):
    """What applying a runner's report needs of the reconciler (reconciler.py), so that this
    module sits below it: the reconciler calls in, never the other way."""

    metrics: OperatorMetrics

    async def write_status(self, entry: Tracked, status: api.SWERolloutStatus) -> None: ...

    def assignment(self, entry: Tracked, *, role: str, attempt: int) -> Assignment: ...

    async def retry(self, entry: Tracked, *, reason: str, cause: str) -> bool: ...


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


async def apply_runner_event(r: Reconciler, entry: Tracked, event: RunnerEvent) -> bool:
    """Apply one report (entry.lock held); False when it no longer applies (a duplicate)."""
    if event.log is not None and not entry.phase.is_terminal:
        # Kept in the store so that `swerollout logs` still has it once the pod is deleted.
        role = "eval" if entry.phase == api.Phase.EVALUATING else "runner"
        logs = api.ContainerLogs.model_validate({role: object_ref(event.log)})
        await r.write_status(entry, api.SWERolloutStatus(logs=logs))
    if event.kind == EventKind.STARTED:
        # A runner notice: what it found out about the inference server (a smaller
        # context than the spec asked, routing rows the server cannot return).
        notice = event.message.strip()
        if notice:
            r.post_event(entry, reason=event.reason or "RunnerNotice", message=notice, warning=True)
        if entry.phase == api.Phase.RESUMING or (
            entry.phase == api.Phase.ABORTED and _took_answer(r, entry, event, AssignmentKind.RESUME)
        ):
            r.metrics.resumes.inc()
            message = "the runner resumed from the snapshot" + (f"; {notice}" if notice else "")
            return await r.transition(entry, Trigger.RESUMED, reason="Resumed", message=message)
        if entry.phase == api.Phase.PREPARED and _took_answer(r, entry, event, AssignmentKind.RUN):
            # A prepared batch's go: its runner's start records Running (Reconciler.observe_batch).
            message = "the runner started from prepared" + (f"; {notice}" if notice else "")
            return await r.transition(entry, Trigger.START_REQUESTED, reason="Started", message=message)
        if notice and entry.phase == api.Phase.RUNNING:
            await r.write_status(entry, api.SWERolloutStatus(message=cut_message(notice)))
        return False
    if event.kind == EventKind.PREPARED:
        return await _prepared(r, entry, event)
    if event.kind == EventKind.ABORTED:
        return await _aborted(r, entry, event)
    if event.kind == EventKind.FINISHED:
        return await _finished(r, entry, event)
    if event.kind == EventKind.EVALUATED:
        return await _evaluated(r, entry, event)
    return await r.transition(
        entry,
        Trigger.FAILED,
        reason=event.reason or "RunnerFailed",
        message=event.message or "the runner failed",
        warning=True,
    )


def _took_answer(r: Reconciler, entry: Tracked, event: RunnerEvent, kind: AssignmentKind) -> bool:
    """The runner started what it is answered now (an Aborted rollout's resume, a Prepared
    one's run: it is no longer suspended) before the pass that records the new phase. Any
    other report of a start (a late copy of the run's own) leaves the phase as it is."""
    attempt = max(1, entry.rollout_status.attempts)
    answer = r.assignment(entry, role="rollout", attempt=attempt)
    return answer.kind == kind and answer.id == event.assignment_id


async def _prepared(r: Reconciler, entry: Tracked, event: RunnerEvent) -> bool:
    """The runner of the current attempt holds the first prompt (a late report of an older
    attempt, or one after the go, no longer applies)."""
    prepared = entry.rollout_status.prepared
    answer = r.assignment(entry, role="rollout", attempt=max(1, entry.rollout_status.attempts))
    if prepared is None or answer.id != event.assignment_id:
        return False
    state = api.PreparedState(since=prepared.since, prepared_at=utcnow().replace(microsecond=0))
    state.prompt_tokens = event.context_tokens
    return await r.transition(
        entry,
        Trigger.PREPARED,
        reason="Prepared",
        message=f"prepared: {event.context_tokens} prompt tokens; the first /generate goes out on resume",
        extra=api.SWERolloutStatus(prepared=state),
    )


async def _aborted(r: Reconciler, entry: Tracked, event: RunnerEvent) -> bool:
    if event.snapshot is None:
        return await r.transition(
            entry, Trigger.FAILED, reason="NoSnapshot", message="the runner aborted without a snapshot", warning=True
        )
    reason = event.reason or "Suspended"
    partial = api.Partial(
        snapshot=object_ref(event.snapshot),
        turns=event.turns,
        tokens=event.context_tokens,
        aborted_at=utcnow().replace(microsecond=0),
        reason=reason,
    )
    if event.weight_version:
        partial.weight_version = event.weight_version
    # spec is the user's: an abort that meets `suspend: false` (a resume that overtook
    # it) is resumed by the next pass, never turned into a suspension.
    applied = await r.transition(
        entry,
        Trigger.ABORTED,
        reason=reason,
        message=event.message or f"aborted after {event.turns} turns; snapshot kept",
        extra=api.SWERolloutStatus(partial=partial, replay=False, progress=ProgressCoalescer.final(entry, event)),
    )
    if applied:
        r.metrics.aborts.labels(abort_reason_label(reason)).inc()
        if entry.abort_told_at:
            r.metrics.abort_fanout.observe(time.monotonic() - entry.abort_told_at)
            entry.abort_told_at = 0.0
    return applied


def _to_ms(at: datetime) -> datetime:
    """Milliseconds kept: finish -> reward is measured from these two, and is often under a second."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


async def _finished(r: Reconciler, entry: Tracked, event: RunnerEvent) -> bool:
    exit_status = event.exit_status or "exit_error"
    result = api.Result(
        exit_status=exit_status,
        turns=event.turns,
        prompt_tokens=event.prompt_tokens,
        response_tokens=event.response_tokens,
        sampled_tokens=event.sampled_tokens,
        dropped_tokens=event.dropped_tokens,
        truncated=event.truncated,
        has_patch=event.patch is not None and event.patch.bytes > 0,
        finished_at=_to_ms(utcnow()),
    )
    if event.trajectory:
        result.trajectory = object_ref(event.trajectory)
    if event.patch:
        result.patch = object_ref(event.patch)
    extra = api.SWERolloutStatus(result=result, progress=ProgressCoalescer.final(entry, event))
    spec = entry.rollout_spec
    decision = gate_exit_status(exit_status, spec.mode)
    graded = spec.reward.enabled and decision.evaluate and result.has_patch
    if is_failed_run(exit_status, graded):
        # The infrastructure ended this run, not the policy, and nothing will be
        # graded: replayed from the last checkpoint while attempts remain (retries.py),
        # else the rollout fails, naming the cause (the trajectory is kept).
        cause = event.message.strip() or "the runner gave no detail"
        retried = retries.is_retried_exit(exit_status, graded) and retries.attempts_left(entry)
        if retried and allowed(entry.phase, Trigger.RETRY):
            return await r.retry(entry, reason=failure_reason(exit_status), cause=f"{exit_status}: {cause}"[:2048])
        return await r.transition(
            entry,
            Trigger.FAILED,
            reason=failure_reason(exit_status),
            message=f"{exit_status}: {cause}"[:4096],
            extra=extra,
            warning=True,
        )
    if not spec.reward.enabled:
        return await r.transition(
            entry,
            Trigger.FINISHED_UNGRADED,
            reason="Finished",
            message=f"{exit_status}; reward disabled",
            extra=extra,
        )
    if not decision.evaluate or not result.has_patch:
        why = decision.reason if not decision.evaluate else "no patch to evaluate"
        reward = api.RewardStatus(value=0.0, resolved=False, graded=False, message=why[:1024])
        return await r.transition(
            entry,
            Trigger.FINISHED_UNGRADED,
            reason="NotGraded",
            message=f"{exit_status}: {why}",
            extra=merged(extra, api.SWERolloutStatus(reward=reward)),
        )
    # The next pass deletes the policy's pod (the eval pod never sees it) and makes the eval pod.
    return await r.transition(
        entry,
        Trigger.FINISHED,
        reason="Finished",
        message=f"{exit_status}; evaluating the patch in a fresh pod",
        extra=merged(extra, api.SWERolloutStatus(evaluation=retries.next_evaluation(entry))),
    )


async def _evaluated(r: Reconciler, entry: Tracked, event: RunnerEvent) -> bool:
    report = event.reward
    if report is None:
        return False
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
        graded_at=_to_ms(utcnow()),
    )
    if event.report:
        reward.report = object_ref(event.report)
    status = entry.rollout_status
    started = status.evaluation.started_at if status.evaluation is not None else None
    exit_status = status.result.exit_status if status.result is not None else ""
    if is_failed_run(exit_status, report.graded):
        # An autosubmission after an infrastructure exit that could not be graded either:
        # nothing to show for the run, so replayed like any infrastructure exit (retries.py).
        cause = f"{exit_status}, and the autosubmitted patch could not be graded: {report.message}"
        if retries.is_retried_exit(exit_status, report.graded) and retries.attempts_left(entry):
            return await r.retry(entry, reason=failure_reason(exit_status), cause=cause[:2048])
        applied = await r.transition(
            entry,
            Trigger.FAILED,
            reason=failure_reason(exit_status),
            message=cause[:4096],
            extra=api.SWERolloutStatus(reward=reward),
            warning=True,
        )
    else:
        applied = await r.transition(
            entry,
            Trigger.EVALUATED,
            reason="Evaluated",
            message=f"reward {report.reward} ({'resolved' if report.resolved else 'not resolved'})",
            extra=api.SWERolloutStatus(reward=reward),
        )
    if applied and started is not None:
        r.metrics.eval_duration.observe((utcnow() - started).total_seconds())
    return applied
