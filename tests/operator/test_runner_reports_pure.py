"""phases.decide as a pure function: (status, spec, report, context) -> Decision,
with no reconciler, no API server and no clock but the one passed in."""

from __future__ import annotations

from datetime import UTC, datetime

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase
from swerollout.wire import ingest as wire
from swerollout_operator.phases import Context, Trigger, decide

from .test_pure import rollout

AT = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
REF = wire.StoredObjectRef(kind=wire.ObjectKind.TRAJECTORY, sha256="1" * 64, bytes=10, ref="file:///t")
PATCH = wire.StoredObjectRef(kind=wire.ObjectKind.PATCH, sha256="2" * 64, bytes=20, ref="file:///p")
SPEC = rollout().spec


def context(told: wire.Assignment | None = None, *, attempts_left: bool = True) -> Context:
    progress = wire.ProgressReport(turns=3, context_tokens=900, generated_tokens=321, inference_aborts=1)
    return Context(told=told or wire.Run(id="run:1", spec={}), progress=progress, attempts_left=attempts_left, at=AT)


def status(phase: Phase, **fields: object) -> api.SWERolloutStatus:
    return api.SWERolloutStatus.model_validate({"phase": phase, "attempts": 1, **fields})


def test_an_abort_records_the_snapshot_and_the_final_progress() -> None:
    report = wire.Aborted(assignment_id="abort:1:2", snapshot=REF, turns=3, context_tokens=900, weight_version="v7")
    d = decide(status(Phase.RUNNING), SPEC, report, context())
    assert d.trigger is Trigger.ABORTED and d.reason == "Suspended" and d.status is not None
    assert d.status.partial is not None and d.status.partial.snapshot.sha256 == REF.sha256
    assert d.status.partial.aborted_at == AT and d.status.partial.weight_version == "v7"
    assert d.status.progress is not None and d.status.progress.generated_tokens == 321
    assert d.status.replay is False


def test_a_finish_is_graded_ungraded_retried_or_failed_by_its_exit() -> None:
    submitted = wire.Finished(assignment_id="run:1", exit_status="submitted", trajectory=REF, patch=PATCH, turns=4)
    graded = decide(status(Phase.RUNNING), SPEC, submitted, context())
    assert graded.trigger is Trigger.FINISHED and graded.status is not None
    assert graded.status.result is not None and graded.status.result.has_patch
    assert graded.status.evaluation == api.EvaluationState(attempt=1)
    context_out = submitted.model_copy(update={"exit_status": "submitted (exit_context)"})
    cut = decide(status(Phase.RUNNING), SPEC, context_out, context())
    assert cut.status is not None and cut.status.result is not None and cut.status.result.truncated
    # An infrastructure exit with nothing graded: replayed while attempts remain, else failed.
    down = wire.Finished(assignment_id="run:1", exit_status="exit_api", trajectory=REF, message="server gone")
    retried = decide(status(Phase.RUNNING), SPEC, down, context())
    assert retried.retry and retried.reason == "InferenceFailed" and "server gone" in retried.message
    failed = decide(status(Phase.RUNNING), SPEC, down, context(attempts_left=False))
    assert failed.trigger is Trigger.FAILED and failed.warning and failed.status is not None
    assert failed.status.result is not None and failed.status.result.trajectory is not None


def test_a_start_resumes_only_the_resume_it_is_told_now() -> None:
    resume = wire.Resume(id="resume:1:t", spec={}, snapshot=REF)
    aborted = status(Phase.ABORTED)
    took = decide(aborted, SPEC, wire.Started(assignment_id="resume:1:t"), context(resume))
    assert took.trigger is Trigger.RESUMED
    # A late copy of the run's own start leaves it Aborted, and writes nothing.
    late = decide(aborted, SPEC, wire.Started(assignment_id="run:1"), context(resume))
    assert late.trigger is None and late.status is None
    # A notice while running is written as the message and posted, with no transition.
    notice = wire.Started(assignment_id="run:1", reason="InferenceNotice", message=" context cut to 4096 ")
    said = decide(status(Phase.RUNNING), SPEC, notice, context())
    assert said.trigger is None and said.notice == "context cut to 4096" and said.notice_reason == "InferenceNotice"
    assert said.status == api.SWERolloutStatus(message="context cut to 4096")


def test_an_evaluation_grades_and_an_ungradeable_autosubmission_is_replayed_or_fails() -> None:
    evaluating = status(
        Phase.EVALUATING, result={"exitStatus": "submitted", "turns": 1, "promptTokens": 1, "responseTokens": 1}
    )
    ok = wire.Evaluated(assignment_id="eval:1", reward=wire.RewardReport(resolved=True, reward=1.0))
    d = decide(evaluating, SPEC, ok, context())
    assert d.trigger is Trigger.EVALUATED and d.status is not None and d.status.reward is not None
    assert d.status.reward.value == 1.0 and d.status.reward.resolved
    auto = evaluating.model_copy(update={"result": evaluating.result.model_copy(update={"exit_status": "exit_api"})})  # type: ignore[union-attr]
    ungradable = wire.Evaluated(
        assignment_id="eval:1", reward=wire.RewardReport(resolved=False, reward=0.0, graded=False)
    )
    # Nothing to show for the run: replayed while attempts remain, else failed with the reward.
    assert decide(auto, SPEC, ungradable, context()).retry
    failed = decide(auto, SPEC, ungradable, context(attempts_left=False))
    assert failed.trigger is Trigger.FAILED and failed.status is not None and failed.status.reward is not None
    assert d.status.reward.graded_at == AT
