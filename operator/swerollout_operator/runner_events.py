"""What a runner's report (ingest API) does to its rollout, as a pure decision.

`decide(status, spec, event, ...)` returns a `Decision`: at most one phase-machine
event (so a repeated report is refused by the machine, not applied twice), the
partial status written with it, and the Event or notice that goes with it. It reads
nothing but its arguments and writes nothing; the reconciler applies it
(`Reconciler.on_runner_event`), as it applies `phases.apply`. The status it carries is
built from the API models with the report's own numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from swerollout.api import v1alpha1 as api
from swerollout.exit_status import ExitStatus, base_exit, gate_exit_status, is_failed_run, is_truncated
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import Assignment, AssignmentKind, ProgressReport, RunnerEvent, StoredObjectRef

from . import retries
from .phases import Trigger, allowed, cut_message, merged

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
    """What the runner of the current attempt is told now (assignments.py)."""
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
