"""Warm starts, the pure parts: the Prepared phase, what its runner is told, its deadlines,
and what a prewarmed eval pod is told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import ConditionType, Phase, SWERolloutBatchSpec
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import Assignment, AssignmentKind
from swerollout_operator import phases, podspec
from swerollout_operator.cache import RolloutCache
from swerollout_operator.deadlines import deadline_passed, prepared_expired, startup_overdue
from swerollout_operator.phases import IllegalTransition, Trigger, assignment_for
from swerollout_operator.settings import OperatorSettings

from .test_pure import rollout


def told(body: dict[str, Any], **kwargs: Any) -> Assignment:
    """assignment_for over the rollout as the operator's cache holds it."""
    meta = {"name": "r", "namespace": "ns", "uid": "u1", **body["metadata"]}
    entry, _ = RolloutCache().observe({**body, "metadata": meta})
    return assignment_for(entry, **kwargs)


def _conditions(patch: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}


def _step(status: dict[str, Any], trigger: Trigger, reason: str) -> dict[str, Any]:
    change = phases.apply(
        api.SWERolloutStatus.model_validate(status), trigger, reason=reason, message=reason, generation=1
    )
    return {**status, **change.status_patch}


def test_prepared_is_entered_from_starting_and_left_for_running_or_a_fresh_start() -> None:
    status = _step({}, Trigger.POD_CREATED, "PodCreated")
    status = _step(status, Trigger.PREPARE, "Preparing")
    assert status["phase"] == "Prepared"
    assert _conditions(status)[ConditionType.SANDBOX_READY.value] == ("True", "Preparing")
    assert _conditions(status)[ConditionType.PREPARED.value] == ("False", "Preparing")
    assert _conditions(status)[ConditionType.GENERATING.value] == ("False", "Preparing")
    status = _step(status, Trigger.PREPARED, "Prepared")
    assert status["phase"] == "Prepared" and _conditions(status)["Prepared"] == ("True", "Prepared")

    running = _step(status, Trigger.START_REQUESTED, "Started")
    assert running["phase"] == "Running"
    assert _conditions(running)["Prepared"][0] == "False" and _conditions(running)["Generating"][0] == "True"

    released = _step(status, Trigger.PREPARED_RELEASED, "Released")
    assert released["phase"] == "Prepared"
    assert _conditions(released)["Prepared"] == ("False", "Released")
    assert _conditions(released)["SandboxReady"] == ("False", "Released")
    restarted = _step(released, Trigger.RESTARTED, "Restarted")
    assert restarted["phase"] == "Starting"
    # A start that a runner reports late, or a second go, is no transition.
    for trigger in (Trigger.PREPARED, Trigger.START_REQUESTED, Trigger.PREPARE):
        with pytest.raises(IllegalTransition):
            phases.apply(api.SWERolloutStatus.model_validate(running), trigger, reason="x", message="x", generation=1)


def _body(phase: Phase, *, suspend: bool = False, reclaimed: bool = False, **spec: Any) -> dict[str, Any]:
    sandbox: dict[str, Any] = {"podName": "r-a1"}
    if reclaimed:
        sandbox["reclaimedAt"] = "2026-12-01T00:00:00Z"
    wire = rollout(suspend=suspend, **spec).to_wire()["spec"]
    wire["inference"]["weightVersion"] = "v1"
    return {
        "metadata": {"generation": 2},
        "spec": wire,
        "status": {"phase": phase.value, "attempts": 1, "sandbox": sandbox},
    }


def test_a_prepared_runner_is_told_prepare_then_run_with_the_id_running_answers() -> None:
    own = told(_body(Phase.PREPARED, suspend=True), role="rollout", attempt=1)
    assert own.kind == AssignmentKind.PREPARE and own.id == "prepare:1" and own.spec is not None
    by_batch = told(_body(Phase.PREPARED), role="rollout", attempt=1, batch=SWERolloutBatchSpec(suspend=True))
    assert by_batch.kind == AssignmentKind.PREPARE
    # The go: the batch resumed with a new weight version; the run carries it.
    go = told(
        _body(Phase.PREPARED), role="rollout", attempt=1, batch=SWERolloutBatchSpec(suspend=False, weight_version="v2")
    )
    running = told(_body(Phase.RUNNING), role="rollout", attempt=1)
    assert go.kind == AssignmentKind.RUN and go.id == running.id == "run:1"
    assert go.spec is not None and go.spec["inference"]["weightVersion"] == "v2"
    # Released: that pod's runner stops; the pass starts a fresh pod at the go.
    for suspend in (True, False):
        gone = told(_body(Phase.PREPARED, suspend=suspend, reclaimed=True), role="rollout", attempt=1)
        assert gone.kind == AssignmentKind.STOP


def test_a_prewarmed_eval_pod_waits_until_evaluating_and_stops_at_the_end() -> None:
    prewarm = {"reward": {"prewarm": True}}
    for phase in (Phase.PREPARED, Phase.RUNNING, Phase.RESUMING, Phase.ABORTED):
        assert told(_body(phase, **prewarm), role="eval", attempt=1).kind == AssignmentKind.WAIT
        assert told(_body(phase), role="eval", attempt=1).kind == AssignmentKind.STOP
    for phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert told(_body(phase, **prewarm), role="eval", attempt=1).kind == AssignmentKind.STOP
    evaluating = _body(Phase.EVALUATING, **prewarm)
    evaluating["status"]["evaluation"] = {"attempt": 1}
    patch = {"ref": "file:///p", "sha256": "2" * 64, "bytes": 20}
    result = {"exitStatus": "submitted", "turns": 1, "promptTokens": 1, "responseTokens": 1, "hasPatch": True}
    evaluating["status"]["result"] = {**result, "patch": patch}
    graded = told(evaluating, role="eval", attempt=1)
    assert isinstance(graded, wire.Eval) and graded.patch.sha256 == "2" * 64 and graded.exit_status == "submitted"


def _stamp(seconds_ago: float) -> str:
    return (
        (datetime.now(UTC) - timedelta(seconds=seconds_ago)).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


def _tracked(body: dict[str, Any]) -> Any:
    cache = RolloutCache()
    body = {**body, "metadata": {"name": "r", "namespace": "ns", "uid": "u1", "generation": 1, **body["metadata"]}}
    entry, _ = cache.observe(body)
    return entry


def test_a_prepared_pod_is_held_for_prepared_timeout_seconds_from_when_it_was_ready() -> None:
    def prepared(since: float, **extra: Any) -> Any:
        body = _body(Phase.PREPARED, suspend=True, sandbox={"preparedTimeoutSeconds": 60})
        body["metadata"]["creationTimestamp"] = _stamp(3600)
        body["status"]["prepared"] = {"since": _stamp(since), **extra}
        return _tracked(body)

    assert not prepared_expired(prepared(30))
    late = prepared(61)
    assert prepared_expired(late) and deadline_passed(late, datetime.now(UTC).timestamp())
    assert not prepared_expired(prepared(61, releasedAt=_stamp(1)))


def test_a_fresh_start_after_a_release_gets_its_own_startup_deadline() -> None:
    body = _body(Phase.STARTING, sandbox={"startupTimeoutSeconds": 60})
    body["metadata"]["creationTimestamp"] = _stamp(3600)
    assert startup_overdue(_tracked(body))
    body["status"]["prepared"] = {"since": _stamp(3500), "restartedAt": _stamp(10)}
    assert not startup_overdue(_tracked(body))


def test_pods_of_one_task_image_prefer_a_node_that_holds_it() -> None:
    def pod(image: str, name: str) -> dict[str, Any]:
        spec = {
            "instance": {
                "instanceId": "demo__calc-1",
                "repo": "demo/calc",
                "baseCommit": "abcdef0",
                "image": image,
                "problemStatement": "p",
                "evaluation": {"failToPass": ["t"]},
            },
            "inference": {"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"},
        }
        meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {}}
        return podspec.rollout_pod(api.SWERollout.model_validate({"spec": spec}), meta, OperatorSettings(), attempt=1)

    a, b = pod("swebench/sweb.eval.x86_64.a:latest", "g-0-0"), pod("swebench/sweb.eval.x86_64.a:latest", "g-0-1")
    other = pod("swebench/sweb.eval.x86_64.b:latest", "g-1-0")
    label = a["metadata"]["labels"][api.LABEL_IMAGE]
    assert label == b["metadata"]["labels"][api.LABEL_IMAGE] != other["metadata"]["labels"][api.LABEL_IMAGE]
    (term,) = a["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": {api.LABEL_IMAGE: label}},
        "topologyKey": "kubernetes.io/hostname",
    }
    sandbox = next(c for c in a["spec"]["containers"] if c["name"] == "sandbox")
    assert sandbox["imagePullPolicy"] == "IfNotPresent", "a :latest task image is pulled once per node, not per pod"
