"""The operator's retry policy against a real API server (the runner's side played over
HTTP): a pod lost while Running is replayed from the checkpoint its runner last reported
into a fresh pod, an infrastructure exit is replayed the same way, each attempt counted
and recorded, until spec.sandbox.maxAttempts; then the rollout fails with the cause."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx

from swerollout.wire import ingest as wire
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, ingest_url, mark_ready, phase, setup_rollout, wait_for


def _auth(token: str, attempt: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Swerollout-Role": "rollout", "X-Swerollout-Attempt": str(attempt)}


def _status(kubectl: Callable[..., Any], namespace: str, name: str) -> dict[str, Any]:
    return dict((get_json(kubectl, "swer", name, "-n", namespace) or {}).get("status") or {})


def _assignment(url: str, auth: dict[str, str], kind: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        answer = dict(httpx.get(url, headers=auth, params={"wait": "5"}, timeout=30).json())
        return answer if answer["kind"] == kind else None

    return dict(wait_for(f"a {kind} assignment", probe))


def test_a_lost_pod_and_infrastructure_exits_replay_from_the_checkpoint_until_max_attempts(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    name = "lost"
    uid, token = setup_rollout(operator, kubectl, namespace, name, sandbox={"maxAttempts": 3})
    url = ingest_url(operator, namespace, name, uid, "/assignment")
    first = _auth(token, 1)
    mark_ready(kubectl, namespace, f"{name}-a1")
    _assignment(url, first, "run")
    # Two segments of a chain (the operator never reads inside them), then the progress
    # report that names the newer one as the head.
    objects = ingest_url(operator, namespace, name, uid, "/objects/checkpoint")
    segments = [
        wire.StoredObjectRef.model_validate(httpx.put(objects, content=body, headers=first).json())
        for body in (b"segment one", b"segment two")
    ]
    report = wire.ProgressReport(
        turns=2,
        context_tokens=900,
        generated_tokens=300,
        checkpoint=wire.CheckpointReport(
            head=segments[1], attempt=1, segments=2, chain_bytes=22, turns=2, context_tokens=900, sampled_tokens=300
        ),
    )
    progress = ingest_url(operator, namespace, name, uid, "/progress")
    assert httpx.post(progress, content=report.model_dump_json(), headers=first).status_code == 200

    # The node loses the pod mid-turn: no snapshot was taken, the checkpoint is the resume point.
    kubectl("delete", "pod", f"{name}-a1", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    wait_for("attempt 2", lambda: _status(kubectl, namespace, name).get("attempts") == 2, op=operator)
    status = _status(kubectl, namespace, name)
    assert status["phase"] == "Resuming" and status["replay"] is True, status
    assert status["partial"]["snapshot"]["sha256"] == segments[1].sha256 and status["partial"]["turns"] == 2
    assert status["partial"]["reason"] == "PodLost"
    assert [(r["attempt"], r["reason"], r["turns"]) for r in status["retries"]] == [(1, "PodLost", 2)]
    assert status["sandbox"]["podName"] == f"{name}-a2"
    # The old attempt's runner is told to stop; the new pod's resumes from the checkpoint.
    assert httpx.get(url, headers=first, params={"wait": "0"}).json()["kind"] == "stop"
    # Still alive in its grace period, the old runner aborts on that stop and reports its
    # snapshot: a report of a replaced attempt, which must not touch the replay.
    snapshots = ingest_url(operator, namespace, name, uid, "/objects/snapshot")
    stale = wire.StoredObjectRef.model_validate(httpx.put(snapshots, content=b"stale", headers=first).json())
    aborted = wire.Aborted(assignment_id="run:1", snapshot=stale, turns=3)
    answer = httpx.post(
        ingest_url(operator, namespace, name, uid, "/events"), content=aborted.model_dump_json(), headers=first
    ).json()
    assert answer["duplicate"] is True, answer
    status = _status(kubectl, namespace, name)
    assert status["phase"] == "Resuming" and status["partial"]["snapshot"]["sha256"] == segments[1].sha256, status
    # No node can take the replay pod yet: the rollout stays Resuming and says why.
    unschedulable = {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory.",
    }]}}  # fmt: skip
    kubectl(
        "patch", "pod", f"{name}-a2", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(unschedulable),
    )  # fmt: skip
    wait_for(
        "the wait for a node in the message",
        lambda: "3 Insufficient memory" in str(_status(kubectl, namespace, name).get("message")),
        op=operator,
    )
    status = _status(kubectl, namespace, name)
    assert status["phase"] == "Resuming", status
    assert status["message"] == (
        f"waiting for capacity (Unschedulable): pod {name}-a2: 0/3 nodes are available: 3 Insufficient memory."
    )
    second = _auth(token, 2)
    mark_ready(kubectl, namespace, f"{name}-a2")
    resume = _assignment(url, second, "resume")
    assert resume["replay"] is True and resume["snapshot"]["sha256"] == segments[1].sha256
    # The chain is readable from the new pod: the head as the snapshot, its parent by sha256
    # as a checkpoint segment of this rollout, nothing else.
    base = ingest_url(operator, namespace, name, uid, "/objects")
    assert httpx.get(f"{base}/snapshot/{segments[1].sha256}", headers=second).content == b"segment two"
    assert httpx.get(f"{base}/checkpoint/{segments[0].sha256}", headers=second).content == b"segment one"
    stranger = hashlib.sha256(b"not stored").hexdigest()
    assert httpx.get(f"{base}/checkpoint/{stranger}", headers=second).status_code == 404
    events = ingest_url(operator, namespace, name, uid, "/events")
    started = wire.Started(assignment_id=resume["id"])
    assert httpx.post(events, content=started.model_dump_json(), headers=second).status_code == 200
    wait_for("Running", lambda: phase(kubectl, namespace, name) == "Running", op=operator)

    # The sandbox fails under the second attempt: an infrastructure exit, replayed again.
    trajectory = httpx.put(f"{base}/trajectory", content=b"t", headers=second)
    failed = wire.Finished(
        assignment_id=resume["id"], exit_status="exit_environment_error", turns=2,
        message="SandboxError: the sandbox stopped answering",
        trajectory=wire.StoredObjectRef.model_validate_json(trajectory.content),
    )  # fmt: skip
    assert httpx.post(events, content=failed.model_dump_json(), headers=second).status_code == 200
    wait_for("attempt 3", lambda: _status(kubectl, namespace, name).get("attempts") == 3, op=operator)
    status = _status(kubectl, namespace, name)
    assert [r["reason"] for r in status["retries"]] == ["PodLost", "SandboxFailed"]
    assert not status.get("result"), "a retried run records no result"
    third = _auth(token, 3)
    mark_ready(kubectl, namespace, f"{name}-a3")
    resume = _assignment(url, third, "resume")
    started = wire.Started(assignment_id=resume["id"])
    assert httpx.post(events, content=started.model_dump_json(), headers=third).status_code == 200
    wait_for("Running", lambda: phase(kubectl, namespace, name) == "Running", op=operator)

    # The last attempt: the same kind of failure now ends the rollout, naming the cause.
    down = failed.model_copy(update={"exit_status": "exit_api", "message": "ModelUnavailableError: down"})
    assert httpx.post(events, content=down.model_dump_json(), headers=third).status_code == 200
    wait_for("Failed", lambda: phase(kubectl, namespace, name) == "Failed", op=operator)
    status = _status(kubectl, namespace, name)
    assert status["attempts"] == 3 and status["message"] == "exit_api: ModelUnavailableError: down"
    reasons = kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
        "-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ).stdout.split()  # fmt: skip
    assert {"PodLost", "SandboxFailed", "InferenceFailed"} <= set(reasons), reasons
    assert json.loads(json.dumps(status["retries"]))[-1]["attempt"] == 2


def test_an_autosubmission_the_eval_pod_could_not_grade_is_replayed_like_any_infrastructure_exit(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    """Validate mode grades an autosubmission: a run that ended on exit_api with its diff
    submitted goes to the eval pod, which could not grade it either. Nothing to show for
    the run, so it is replayed into a fresh pod (the eval pod goes too); the replayed run's
    evaluation starts a fresh eval pod (no name reused) and its reward is the rollout's."""
    name = "ungraded"
    uid, token = setup_rollout(operator, kubectl, namespace, name, mode="validate", sandbox={"maxAttempts": 2})
    url = ingest_url(operator, namespace, name, uid, "/assignment")
    events = ingest_url(operator, namespace, name, uid, "/events")
    first = _auth(token, 1)
    mark_ready(kubectl, namespace, f"{name}-a1")
    run = _assignment(url, first, "run")
    patches = ingest_url(operator, namespace, name, uid, "/objects/patch")
    patch = wire.StoredObjectRef.model_validate(
        httpx.put(patches, content=b"diff --git a/x b/x\n", headers=first).json()
    )
    trajectories = ingest_url(operator, namespace, name, uid, "/objects/trajectory")
    trajectory = wire.StoredObjectRef.model_validate(httpx.put(trajectories, content=b"t", headers=first).json())
    finished = wire.Finished(
        assignment_id=run["id"], exit_status="submitted (exit_api)", turns=3,
        message="ModelUnavailableError: down", patch=patch, trajectory=trajectory,
    )  # fmt: skip
    assert httpx.post(events, content=finished.model_dump_json(), headers=first).status_code == 200
    wait_for("Evaluating", lambda: phase(kubectl, namespace, name) == "Evaluating", op=operator)
    wait_for("eval pod 1", lambda: (_status(kubectl, namespace, name).get("evaluation") or {}).get("podName"))
    assert _status(kubectl, namespace, name)["evaluation"]["podName"] == f"{name}-eval1"
    mark_ready(kubectl, namespace, f"{name}-eval1")
    evaluator = {**_auth(token, 1), "X-Swerollout-Role": "eval"}
    grade = _assignment(url, evaluator, "eval")
    ungraded = wire.Evaluated(
        assignment_id=grade["id"],
        reward=wire.RewardReport(resolved=False, reward=0.0, graded=False, message="the patch does not apply"),
    )  # fmt: skip
    assert httpx.post(events, content=ungraded.model_dump_json(), headers=evaluator).status_code == 200

    wait_for("attempt 2", lambda: _status(kubectl, namespace, name).get("attempts") == 2, op=operator)
    status = _status(kubectl, namespace, name)
    assert status["phase"] == "Resuming" and status["replay"] is True, status
    assert [(r["attempt"], r["reason"]) for r in status["retries"]] == [(1, "InferenceFailed")]
    assert not status.get("result") and not status.get("reward"), "a retried run records no result"
    wait_for("the eval pod deleted", lambda: get_json(kubectl, "pod", f"{name}-eval1", "-n", namespace) is None)
    second = _auth(token, 2)
    mark_ready(kubectl, namespace, f"{name}-a2")
    # No checkpoint was reported, so there is no snapshot to resume: the fresh pod is told to
    # run from the start (a Run with replay, under the id a resume has).
    resume = _assignment(url, second, "run")
    assert resume["replay"] is True and resume["id"].startswith("resume:2:"), resume
    started = wire.Started(assignment_id=resume["id"])
    assert httpx.post(events, content=started.model_dump_json(), headers=second).status_code == 200
    wait_for("Running", lambda: phase(kubectl, namespace, name) == "Running", op=operator)
    submitted = finished.model_copy(update={"assignment_id": resume["id"], "exit_status": "submitted", "turns": 4})
    assert httpx.post(events, content=submitted.model_dump_json(), headers=second).status_code == 200
    wait_for("eval pod 2", lambda: (_status(kubectl, namespace, name).get("evaluation") or {}).get("podName"))
    status = _status(kubectl, namespace, name)
    assert (status["evaluation"]["attempt"], status["evaluation"]["podName"]) == (2, f"{name}-eval2"), status
    mark_ready(kubectl, namespace, f"{name}-eval2")
    evaluator = {**_auth(token, 2), "X-Swerollout-Role": "eval"}
    grade = _assignment(url, evaluator, "eval")
    graded = ungraded.model_copy(
        update={"assignment_id": grade["id"], "reward": wire.RewardReport(resolved=True, reward=1.0)}
    )
    assert httpx.post(events, content=graded.model_dump_json(), headers=evaluator).status_code == 200
    wait_for("Succeeded", lambda: phase(kubectl, namespace, name) == "Succeeded", op=operator)
    status = _status(kubectl, namespace, name)
    assert status["reward"]["value"] == 1.0 and status["result"]["exitStatus"] == "submitted", status
    assert status["attempts"] == 2 and [r["reason"] for r in status["retries"]] == ["InferenceFailed"]
