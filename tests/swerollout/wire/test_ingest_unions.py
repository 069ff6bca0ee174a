"""The ingest wire as tagged unions: each kind carries the fields it must, and the JSON
names the kind, so a runner and an operator of this version read each other's bodies."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swerollout.wire import ingest as wire

REF = wire.StoredObjectRef(kind=wire.ObjectKind.SNAPSHOT, sha256="0" * 64, bytes=3, ref="file:///s")


def test_each_report_kind_round_trips_as_its_own_type() -> None:
    reports: list[wire.RunnerEvent] = [
        wire.Started(assignment_id="run:1", reason="InferenceNotice", message="smaller context"),
        wire.Prepared(assignment_id="prepare:1", context_tokens=812),
        wire.Aborted(assignment_id="abort:1:2", snapshot=REF, turns=3, context_tokens=900),
        wire.Finished(assignment_id="run:1", exit_status="submitted", trajectory=REF, turns=4),
        wire.Evaluated(assignment_id="eval:1", reward=wire.RewardReport(resolved=True, reward=1.0)),
        wire.Failed(assignment_id="run:1", reason="RunnerSetupFailed", message="bad tokenizer"),
    ]
    for report in reports:
        again = wire.RUNNER_EVENT.validate_json(report.model_dump_json())
        assert type(again) is type(report) and again == report


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ({"kind": "finished", "assignment_id": "run:1", "exit_status": "submitted"}, ("finished", "trajectory")),
        ({"kind": "aborted", "assignment_id": "abort:1:2", "turns": 2}, ("aborted", "snapshot")),
        ({"kind": "evaluated", "assignment_id": "eval:1"}, ("evaluated", "reward")),
        ({"kind": "finished", "assignment_id": "run:1", "trajectory": REF.model_dump()}, ("finished", "exit_status")),
    ],
)
def test_a_report_without_what_its_kind_must_carry_is_refused_naming_it(
    body: dict[str, object], missing: tuple[str, str]
) -> None:
    with pytest.raises(ValidationError) as caught:
        wire.RUNNER_EVENT.validate_python(body)
    assert caught.value.errors()[0]["loc"] == missing


def test_a_field_of_another_kind_is_refused() -> None:
    """A snapshot on a start, a reward on a finish: a runner of another shape is told, not ignored."""
    with pytest.raises(ValidationError, match="snapshot"):
        wire.RUNNER_EVENT.validate_python({"kind": "started", "assignment_id": "a", "snapshot": REF.model_dump()})
    with pytest.raises(ValidationError, match="unknown|does not match|tag"):
        wire.RUNNER_EVENT.validate_python({"kind": "exploded", "assignment_id": "a"})


@pytest.mark.parametrize("kind", ["started", "failed", "aborted"])
def test_a_reason_that_cannot_be_a_condition_reason_is_refused_at_the_wire(kind: str) -> None:
    """The reason becomes a status condition's reason: a bad one is the runner's 400 naming
    the field, not a status the operator cannot write."""
    body: dict[str, object] = {"kind": kind, "assignment_id": "a", "reason": "no spaces allowed"}
    if kind == "aborted":
        body["snapshot"] = REF.model_dump()
    with pytest.raises(ValidationError) as caught:
        wire.RUNNER_EVENT.validate_python(body)
    assert caught.value.errors()[0]["loc"] == (kind, "reason")
    body["reason"] = ""
    assert wire.RUNNER_EVENT.validate_python(body).kind == kind


def test_assignments_carry_what_their_kind_needs() -> None:
    spec = {"instance": {"instanceId": "i"}}
    told: list[wire.Assignment] = [
        wire.Wait(id="wait"),
        wire.Stop(id="stop"),
        wire.Abort(id="abort:1:3"),
        wire.Run(id="run:1", spec=spec),
        wire.Prepare(id="prepare:1", spec=spec),
        wire.Resume(id="resume:2:t", attempt=2, spec=spec, snapshot=REF, replay=True),
        wire.Eval(id="eval:1", spec=spec, patch=REF, exit_status="submitted"),
    ]
    for assignment in told:
        again = wire.ASSIGNMENT.validate_json(assignment.model_dump_json())
        assert type(again) is type(assignment) and again == assignment
    with pytest.raises(ValidationError) as caught:
        wire.ASSIGNMENT.validate_python({"kind": "resume", "id": "resume:1:", "spec": spec})
    assert caught.value.errors()[0]["loc"] == ("resume", "snapshot")
    with pytest.raises(ValidationError) as caught:
        wire.ASSIGNMENT.validate_python({"kind": "eval", "id": "eval:1", "spec": spec, "exit_status": "submitted"})
    assert caught.value.errors()[0]["loc"] == ("eval", "patch")
