"""The operator against the real API server, under the chart's ServiceAccount.

No node agent runs here: the tests play the kubelet's part where they need to
(patching pod status), so what is tested is the operator alone.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout_dev.controlplane import ControlPlane
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, mark_ready, phase, pods_of, rollout, wait_for


def test_rollout_gets_one_owned_pod_and_status(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("r1")))
    wait_for("phase Starting", lambda: phase(kubectl, namespace, "r1") == "Starting", op=operator)
    obj = get_json(kubectl, "swer", "r1", "-n", namespace)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["attempts"] == 1
    assert status["sandbox"]["podName"] == "r1-a1"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["SandboxReady"]["status"] == "False"

    (pod,) = pods_of(kubectl, namespace, "r1")
    assert pod["metadata"]["name"] == "r1-a1"
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["uid"] == obj["metadata"]["uid"] and owner["controller"] is True
    assert pod["metadata"]["labels"][api.LABEL_BATCH] == "b1"
    assert pod["spec"]["automountServiceAccountToken"] is False
    secret = get_json(kubectl, "secret", "r1-runner", "-n", namespace)
    assert set(secret["data"]) == {"ingest-token", "swerex-token"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]

    mark_ready(kubectl, namespace, "r1-a1")
    wait_for("phase Running", lambda: phase(kubectl, namespace, "r1") == "Running", op=operator)
    status = get_json(kubectl, "swer", "r1", "-n", namespace)["status"]
    assert status["sandbox"]["podIP"] == "10.1.2.3"
    assert status["sandbox"]["podUID"] == pod["metadata"]["uid"]

    # Where it runs is an Event; the routine steps before it are only in the status
    # (a batch of 500 would otherwise post 500 Events for each).
    def reasons() -> set[str]:
        events = get_json(kubectl, "events", "-n", namespace, "--field-selector", "involvedObject.name=r1")["items"]
        return {e["reason"] for e in events}

    assert "SandboxReady" in wait_for("the SandboxReady event", reasons, op=operator)
    assert "PodCreated" not in reasons()
    metrics = operator.metrics()
    assert 'swerollout_rollouts{phase="Running"} 1.0' in metrics
    # No handler ever raised: each known handler's counter is exported, at 0.
    errors = re.findall(r"^swerollout_reconcile_errors_total\{handler=\"(\w+)\"\} (\S+)$", metrics, re.MULTILINE)
    assert errors and all(float(v) == 0 for _, v in errors), errors


def test_image_pull_failure_is_reported_with_the_image(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("pull")))
    wait_for("pod", lambda: pods_of(kubectl, namespace, "pull"), op=operator)
    status = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "sandbox",
                    "image": "registry.example/calc:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}},
                }
            ],
        }
    }
    kubectl(
        "patch", "pod", "pull-a1", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "pull") == "Failed", op=operator)
    obj = get_json(kubectl, "swer", "pull", "-n", namespace)
    assert "registry.example/calc:1" in obj["status"]["message"]
    assert "ErrImagePull" in obj["status"]["message"]
    complete = next(c for c in obj["status"]["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "ErrImagePull"


def test_startup_timeout_fails_with_a_reason(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("slow", sandbox={"startupTimeoutSeconds": 10}))
    )
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "slow") == "Failed", timeout=60, op=operator)
    obj = get_json(kubectl, "swer", "slow", "-n", namespace)
    assert "startupTimeoutSeconds" in obj["status"]["message"]
    assert "slow-a1" in obj["status"]["message"]


def test_restarts_at_any_point_create_no_second_pod(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    names = [f"batch-{i}" for i in range(8)]
    for i, name in enumerate(names):
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout(name)))
        if i in (2, 5):
            operator.kill()  # SIGKILL while work is in flight
            operator.start()
    operator.kill()
    operator.start()
    for name in names:
        wait_for(f"{name} Starting", lambda n=name: phase(kubectl, namespace, n) == "Starting", op=operator)
    operator.kill()
    operator.start()
    time.sleep(2)  # give a restarted operator the chance to do something wrong
    for name in names:
        pods = pods_of(kubectl, namespace, name)
        assert [p["metadata"]["name"] for p in pods] == [f"{name}-a1"], name
        assert get_json(kubectl, "swer", name, "-n", namespace)["status"]["attempts"] == 1


def test_delete_removes_everything_it_made(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("gone")))
    wait_for("pod", lambda: pods_of(kubectl, namespace, "gone"), op=operator)
    obj = get_json(kubectl, "swer", "gone", "-n", namespace)
    assert api.FINALIZER in obj["metadata"]["finalizers"]
    kubectl("delete", "swer", "gone", "-n", namespace, "--wait=false")
    wait_for("rollout gone", lambda: get_json(kubectl, "swer", "gone", "-n", namespace) is None, op=operator)
    # No kubelet: a deleted pod lingers with a deletionTimestamp until its grace period.
    wait_for(
        "pod deleted",
        lambda: all(p["metadata"].get("deletionTimestamp") for p in pods_of(kubectl, namespace, "gone")),
        op=operator,
    )
    assert get_json(kubectl, "secret", "gone-runner", "-n", namespace) is None


def test_operator_token_cannot_do_more_than_the_chart_grants(
    operator: OperatorProcess, control_plane: ControlPlane, namespace: str
) -> None:
    def can(*args: str, ns: str = namespace) -> bool:
        out = control_plane.kubectl("auth", "can-i", *args, "-n", ns, kubeconfig=operator.kubeconfig)
        return out.stdout.strip() == "yes"

    assert can("create", "pods") and can("watch", "swerollouts.swerollout.io")
    assert can("patch", "swerollouts.swerollout.io", "--subresource=status")
    assert not can("list", "secrets"), "the operator reads only the secrets it names"
    assert not can("create", "deployments.apps")
    assert not can("delete", "swerollouts.swerollout.io"), "deleting rollouts is the trainer's business"
    assert can("watch", "swerolloutbatches.swerollout.io")
    assert not can("patch", "swerolloutbatches.swerollout.io"), "a batch's spec is its users' alone"
    assert not can("get", "swerollouts.swerollout.io", ns="kube-system")
    assert not can("create", "pods", ns="kube-system")


def test_issue_images_for_a_text_only_template_fail_as_invalid_spec(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    """Images the rollout's chat template cannot show are refused, never silently dropped."""
    body = rollout("textonly")
    body["spec"]["instance"]["issueImages"] = ["https://user-images.example/a.png"]
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "textonly") == "Failed", op=operator)
    obj = get_json(kubectl, "swer", "textonly", "-n", namespace)
    assert obj["status"]["message"].startswith(
        "spec.inference.tokenizer 'qwen-2.5': its chat template cannot show images, and spec.instance.issueImages holds 1"
    )
    assert "spec.agent.issueImageMode: Links" in obj["status"]["message"]
    complete = next(c for c in obj["status"]["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "InvalidSpec"
    assert pods_of(kubectl, namespace, "textonly") == []


def test_a_template_typo_fails_as_invalid_spec_before_any_pod(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    """The CRD cannot parse Jinja; the operator checks with the API model and names the template."""
    bad = rollout("typo", agent={"templates": {"nextStepTemplate": "OUT: {{ observaton }}"}})
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(bad))
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "typo") == "Failed", op=operator)
    obj = get_json(kubectl, "swer", "typo", "-n", namespace)
    message = obj["status"]["message"]
    assert message.startswith(
        "spec.agent.templates.nextStepTemplate: next_step_template uses unknown variable(s) ['observaton']"
    )
    complete = next(c for c in obj["status"]["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "InvalidSpec"
    assert pods_of(kubectl, namespace, "typo") == []
    assert get_json(kubectl, "secret", "typo-runner", "-n", namespace) is None
    events = get_json(kubectl, "events", "-n", namespace, "--field-selector", "involvedObject.name=typo")["items"]
    assert "InvalidSpec" in {e["reason"] for e in events}
