"""The ingest API of a real operator process (chart ServiceAccount, real API server).

The tests play the runner's part over real HTTP; no pods run.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from swerollout.wire import ingest as wire
from swerollout_dev.controlplane import ControlPlane
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, ingest_url, mark_ready, phase, setup_rollout, wait_for


def test_tokens_are_checked_and_bad_requests_write_nothing(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    uid_a, token_a = setup_rollout(operator, kubectl, namespace, "ra")
    uid_b, token_b = setup_rollout(operator, kubectl, namespace, "rb")
    progress = wire.ProgressReport(turns=3, context_tokens=100, generated_tokens=50).model_dump_json()
    url = ingest_url(operator, namespace, "ra", uid_a, "/progress")

    assert httpx.post(url, content=progress).status_code == 401
    assert httpx.post(url, content=progress, headers={"Authorization": "Basic abc"}).status_code == 401
    # Rollout b's token on rollout a: forbidden.
    assert httpx.post(url, content=progress, headers={"Authorization": f"Bearer {token_b}"}).status_code == 403
    # The right token but the wrong uid (a deleted incarnation): forbidden too.
    wrong_uid = ingest_url(operator, namespace, "ra", uid_b, "/progress")
    assert httpx.post(wrong_uid, content=progress, headers={"Authorization": f"Bearer {token_a}"}).status_code == 403
    put = ingest_url(operator, namespace, "ra", uid_a, "/objects/trajectory")
    assert httpx.put(put, content=b"x" * 100, headers={"Authorization": f"Bearer {token_b}"}).status_code == 403
    assert not list((operator.store_dir or operator.log_path).rglob("*" + hashlib.sha256(b"x" * 100).hexdigest()))

    auth = {"Authorization": f"Bearer {token_a}"}
    too_big = b'{"turns": 1, "pad": "' + b"x" * (wire.MAX_JSON_BYTES + 10) + b'"}'
    assert httpx.post(url, content=too_big, headers=auth).status_code == 413
    bad = httpx.post(url, content=b'{"turns": -1, "context_tokens": 0, "generated_tokens": 0}', headers=auth)
    assert bad.status_code == 400 and "turns" in bad.json()["message"]
    ok = httpx.post(url, content=progress, headers=auth)
    assert ok.status_code == 200
    metrics = operator.metrics()
    assert 'swerollout_ingest_requests_total{code="403",route="progress"}' in metrics
    assert 'swerollout_ingest_requests_total{code="401",route="progress"}' in metrics


def test_uploads_are_content_addressed_and_verified(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    uid, token = setup_rollout(operator, kubectl, namespace, "up")
    auth = {"Authorization": f"Bearer {token}"}
    url = ingest_url(operator, namespace, "up", uid, "/objects/snapshot")
    data = b"snapshot-bytes" * 1000
    digest = hashlib.sha256(data).hexdigest()
    for malformed in ("../../../etc/passwd", digest.upper(), digest[:-1], digest + "0"):
        refused = httpx.put(url, content=data, headers={**auth, wire.SHA256_HEADER: malformed})
        assert refused.status_code == 400 and wire.SHA256_HEADER in refused.json()["message"], malformed
    assert httpx.get(url + "/..%2F..%2Fetc", headers=auth).status_code in (400, 404)
    corrupt = httpx.put(url, content=data[:-1], headers={**auth, wire.SHA256_HEADER: digest})
    assert corrupt.status_code == 400 and corrupt.json()["error"] == "DigestMismatch"
    first = httpx.put(url, content=data, headers={**auth, wire.SHA256_HEADER: digest})
    again = httpx.put(url, content=data, headers={**auth, wire.SHA256_HEADER: digest})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["sha256"] == digest and first.json()["bytes"] == len(data)
    assert operator.store_dir is not None
    stored = [p for p in operator.store_dir.rglob("*") if p.is_file() and digest in p.name]
    assert len(stored) == 1
    # Only objects the status references can be read back.
    assert (
        httpx.get(ingest_url(operator, namespace, "up", uid, f"/objects/snapshot/{digest}"), headers=auth).status_code
        == 404
    )


def test_long_poll_returns_when_the_work_changes_and_events_are_idempotent(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    uid, token = setup_rollout(operator, kubectl, namespace, "lp")
    auth = {"Authorization": f"Bearer {token}", "X-Swerollout-Role": "rollout", "X-Swerollout-Attempt": "1"}
    url = ingest_url(operator, namespace, "lp", uid, "/assignment")
    first = httpx.get(url, headers=auth, params={"wait": "0"}).json()
    assert first["kind"] == "wait"
    for wait in ("nan", "inf", "-1", "soon"):
        refused = httpx.get(url, headers=auth, params={"wait": wait, "after": first["id"]}, timeout=30)
        assert refused.status_code == 400 and "wait" in refused.json()["message"], wait

    answer: dict[str, Any] = {}

    def poll() -> None:
        answer.update(httpx.get(url, headers=auth, params={"wait": "30", "after": first["id"]}, timeout=60).json())

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(1)
    assert not answer, "the long poll returned before anything changed"
    mark_ready(kubectl, namespace, "lp-a1")
    poller.join(timeout=30)
    assert answer["kind"] == "run" and answer["spec"]["instance"]["instanceId"] == "demo__lp"

    events = ingest_url(operator, namespace, "lp", uid, "/events")
    notice = "spec.inference.maxContextTokens 65536 exceeds the server's context length 32768; using 32768"
    started = wire.Started(
        assignment_id=answer["id"],
        reason="InferenceNotice",
        message=notice,
    ).model_dump_json()
    assert httpx.post(events, content=started, headers=auth).status_code == 200
    # The runner's notice reaches `kubectl describe` (a Warning Event) and the status message.
    wait_for(
        "the notice event",
        lambda: any(
            e["reason"] == "InferenceNotice" and e["message"] == notice and e["type"] == "Warning"
            for e in get_json(kubectl, "events", "-n", namespace)["items"]
        ),
        op=operator,
    )
    assert get_json(kubectl, "swer", "lp", "-n", namespace)["status"]["message"] == notice
    put = ingest_url(operator, namespace, "lp", uid, "/objects/trajectory")
    traj = httpx.put(put, content=b"trajectory", headers=auth).json()
    finished = wire.Finished(
        assignment_id=answer["id"],
        exit_status="exit_format",
        turns=4,
        trajectory=wire.StoredObjectRef.model_validate(traj),
    ).model_dump_json()
    ack1 = httpx.post(events, content=finished, headers=auth).json()
    ack2 = httpx.post(events, content=finished, headers=auth).json()
    assert ack1["duplicate"] is False and ack2["duplicate"] is True
    # exit_format is not graded in train mode: Succeeded with reward 0, ungraded.
    wait_for("Succeeded", lambda: phase(kubectl, namespace, "lp") == "Succeeded", op=operator)
    status = get_json(kubectl, "swer", "lp", "-n", namespace)["status"]
    assert status["result"]["exitStatus"] == "exit_format"
    assert status["result"]["trajectory"]["sha256"] == traj["sha256"]
    assert status["reward"] == {
        "value": 0.0,
        "resolved": False,
        "graded": False,
        "message": status["reward"]["message"],
        "failToPassPassed": 0,
        "failToPassTotal": 0,
        "passToPassPassed": 0,
        "passToPassTotal": 0,
    }
    stop = httpx.get(url, headers=auth, params={"wait": "0"}).json()
    assert stop["kind"] == "stop"


def test_results_endpoint_checks_the_callers_identity(
    operator: OperatorProcess, kubectl: Callable[..., Any], control_plane: ControlPlane, namespace: str
) -> None:
    uid, token = setup_rollout(operator, kubectl, namespace, "res")
    auth = {"Authorization": f"Bearer {token}"}
    mark_ready(kubectl, namespace, "res-a1")
    wait_for("Running", lambda: phase(kubectl, namespace, "res") == "Running", op=operator)
    traj = httpx.put(
        ingest_url(operator, namespace, "res", uid, "/objects/trajectory"), content=b"the-trajectory", headers=auth
    ).json()
    assignment = httpx.get(ingest_url(operator, namespace, "res", uid, "/assignment"), headers=auth).json()
    event = wire.Finished(
        assignment_id=assignment["id"],
        exit_status="exit_max_iter_out",
        trajectory=wire.StoredObjectRef.model_validate(traj),
    )
    assert (
        httpx.post(
            ingest_url(operator, namespace, "res", uid, "/events"), content=event.model_dump_json(), headers=auth
        ).status_code
        == 200
    )
    wait_for("Succeeded", lambda: phase(kubectl, namespace, "res") == "Succeeded", op=operator)

    results = f"{operator.ingest_url}/v1/results/{namespace}/res/trajectory"
    assert httpx.get(results).status_code == 401
    # A ServiceAccount with no rights: authenticated, but not allowed.
    nobody = control_plane.mint_token(namespace, "nobody")
    assert httpx.get(results, headers={"Authorization": f"Bearer {nobody}"}).status_code == 403
    # Grant it `get swerollouts` in this namespace: now it reads the trajectory.
    kubectl("create", "role", "reader", "-n", namespace, "--verb=get", "--resource=swerollouts.swerollout.io")
    kubectl("create", "rolebinding", "reader", "-n", namespace, "--role=reader", f"--serviceaccount={namespace}:nobody")
    got = httpx.get(results, headers={"Authorization": f"Bearer {nobody}"})
    assert got.status_code == 200 and got.content == b"the-trajectory"
    # The runner's ingest token is not a Kubernetes identity.
    assert httpx.get(results, headers=auth).status_code == 401


def test_an_infrastructure_exit_fails_the_rollout_naming_the_cause(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    """exit_api (the inference server stayed down past the budget) is no reward of the
    policy: with no attempt left (spec.sandbox.maxAttempts 1) the rollout ends Failed with
    the runner's cause in status and an Event, and the client's records, `watch`'s counts
    and `kubectl get` all say failed."""
    from swerollout.client.progress import BatchProgress
    from swerollout.client.records import TrainerStatus

    uid, token = setup_rollout(operator, kubectl, namespace, "down", sandbox={"maxAttempts": 1})
    auth = {"Authorization": f"Bearer {token}", "X-Swerollout-Role": "rollout", "X-Swerollout-Attempt": "1"}
    url = ingest_url(operator, namespace, "down", uid, "/assignment")
    first = httpx.get(url, headers=auth, params={"wait": "0"}).json()
    mark_ready(kubectl, namespace, "down-a1")
    run = httpx.get(url, headers=auth, params={"wait": "60", "after": first["id"]}, timeout=90).json()
    assert run["kind"] == "run"
    cause = (
        "ModelUnavailableError: the inference server stayed unavailable for 601 s, past "
        "spec.inference.outageBudgetSeconds (600 s); last error: cannot connect"
    )
    # The runner's own log goes to the store (bounded), and status.logs points at it.
    logs_url = ingest_url(operator, namespace, "down", uid, "/objects/log")
    too_big = httpx.put(logs_url, content=b"x" * (wire.MAX_LOG_BYTES + 1), headers=auth)
    assert too_big.status_code == 413
    runner_log = b"2026-01-01 WARNING agent_runner.pod.session: inference server unavailable\n"
    log_ref = wire.StoredObjectRef.model_validate(httpx.put(logs_url, content=runner_log, headers=auth).json())
    trajectory_url = ingest_url(operator, namespace, "down", uid, "/objects/trajectory")
    trajectory = wire.StoredObjectRef.model_validate(httpx.put(trajectory_url, content=b"t", headers=auth).json())
    finished = wire.Finished(
        assignment_id=run["id"],
        exit_status="exit_api",
        turns=2,
        message=cause,
        trajectory=trajectory,
        log=log_ref,
    ).model_dump_json()
    assert (
        httpx.post(ingest_url(operator, namespace, "down", uid, "/events"), content=finished, headers=auth).status_code
        == 200
    )
    wait_for("Failed", lambda: phase(kubectl, namespace, "down") == "Failed", op=operator)
    obj = get_json(kubectl, "swer", "down", "-n", namespace)
    status = obj["status"]
    assert status["message"] == f"exit_api: {cause}"
    assert status["result"]["exitStatus"] == "exit_api" and status["result"]["turns"] == 2
    assert status["logs"]["runner"]["sha256"] == hashlib.sha256(runner_log).hexdigest()
    assert operator.store_dir is not None
    assert any(p.read_bytes() == runner_log for p in operator.store_dir.rglob("*") if p.is_file())
    # The pod is gone (none ever ran here): `swerollout logs` reads the stored copy.
    import subprocess
    import sys

    logs = subprocess.run(
        [
            sys.executable,
            "-m",
            "swerollout.cli.main",
            "logs",
            "down-a1",
            "-c",
            "runner",
            "-n",
            namespace,
            "--kubeconfig",
            str(operator.kubeconfig),
            "--store-url",
            operator.store_dir.as_uri(),
            "--node-root",
            str(operator.store_dir / "no-node"),
        ],
        capture_output=True,
        timeout=120,
    )
    assert logs.returncode == 0 and logs.stdout == runner_log, logs.stderr
    sandbox = subprocess.run(
        [
            sys.executable,
            "-m",
            "swerollout.cli.main",
            "logs",
            "down-a1",
            "-c",
            "sandbox",
            "-n",
            namespace,
            "--kubeconfig",
            str(operator.kubeconfig),
            "--node-root",
            str(operator.store_dir / "no-node"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sandbox.returncode == 1 and "only its runner's log is kept" in sandbox.stderr
    wait_for(
        "the failure event",
        lambda: any(
            e["reason"] == "InferenceFailed"
            and "outageBudgetSeconds" in e["message"]
            and e["type"] == "Warning"
            and e["involvedObject"]["name"] == "down"
            for e in get_json(kubectl, "events", "-n", namespace)["items"]
        ),
        op=operator,
    )
    progress = BatchProgress.from_objects("b", [obj])
    assert progress.failed == 1 and progress.statuses == {TrainerStatus.FAILED.value: 1}
    printed = kubectl("get", "swer", "down", "-n", namespace, "--no-headers")
    assert "Failed" in printed.stdout.split(), printed.stdout
