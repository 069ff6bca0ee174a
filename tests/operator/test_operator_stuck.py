"""Nothing stuck, nothing unexplained: rollouts the API server will not let start.

Against the real API server under the chart's ServiceAccount (no node runs: pods
never become ready here, which is all these tests need).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.api.labels import rollout_label
from swerollout_dev.controlplane import ControlPlane
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, phase, rollout, wait_for


def _policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    name = f"deny-rejectme-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "validations": [
                {
                    "expression": f"!has(object.metadata.labels) || !('{api.LABEL_ROLLOUT}' in object.metadata.labels)"
                    f" || !object.metadata.labels['{api.LABEL_ROLLOUT}'].startsWith('rejectme')",
                    "message": "pods of rejectme are refused by the site policy",
                },
                {
                    # 403, which the operator retries with backoff: the rollout stays Pending.
                    "expression": f"!has(object.metadata.labels) || !('{api.LABEL_ROLLOUT}' in object.metadata.labels)"
                    f" || !object.metadata.labels['{api.LABEL_ROLLOUT}'].startsWith('held')",
                    "message": "pods of held are forbidden for now",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    return policy, binding


@pytest.fixture
def refusing_policy(control_plane: ControlPlane, kubectl: Callable[..., Any], namespace: str) -> Iterator[None]:
    """An admission policy that refuses (422) the pods of rollouts named rejectme*, and
    forbids (403) those of rollouts named held*."""
    policy, binding = _policy(namespace)
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "labels": {api.LABEL_ROLLOUT: "rejectme-probe"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    # The policy takes effect a moment after it is stored: wait until a dry run is refused.
    wait_for(
        "the admission policy in force",
        lambda: (
            "refused by the site policy"
            in kubectl(
                "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe), check=False
            ).stderr
        ),
    )
    try:
        yield
    finally:
        kubectl(
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            policy["metadata"]["name"],
            "--ignore-not-found",
            check=False,
        )


def test_a_refused_pod_fails_the_rollout_with_the_servers_reason(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str, refusing_policy: None
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("rejectme")))
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "rejectme") == "Failed", op=operator)
    status = get_json(kubectl, "swer", "rejectme", "-n", namespace)["status"]
    assert "refused by the site policy" in status["message"] and "rejectme-a1" in status["message"], status
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "PodRejected"
    events = get_json(kubectl, "events", "-n", namespace, "--field-selector", "involvedObject.name=rejectme")["items"]
    rejected = [e for e in events if e["reason"] == "PodRejected"]
    assert rejected and rejected[0]["type"] == "Warning" and "refused by the site policy" in rejected[0]["message"]
    # The rollout is done with, not retried: the operator does not count it as a failing reconcile.
    assert 'swerollout_reconcile_errors_total{handler="rollout"} 0.0' in operator.metrics()


def test_startup_deadline_counts_from_creation_while_pending(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str, refusing_policy: None
) -> None:
    # The pod is never created (403, retried with backoff), so the rollout never leaves
    # Pending; the deadline still ends it, naming the error.
    kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("held", sandbox={"startupTimeoutSeconds": 10}))
    )
    wait_for("phase Failed", lambda: phase(kubectl, namespace, "held") == "Failed", timeout=90, op=operator)
    status = get_json(kubectl, "swer", "held", "-n", namespace)["status"]
    assert "startupTimeoutSeconds" in status["message"] and "forbidden for now" in status["message"], status
    assert get_json(kubectl, "pods", "-n", namespace)["items"] == []


def test_a_name_longer_than_a_label_value_starts_and_deletes(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    name = "long-" + "x" * 190 + "-end"
    label = rollout_label(name)
    assert len(label) <= 63 and label != rollout_label(name[:-1] + "f")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout(name)))
    wait_for("phase Starting", lambda: phase(kubectl, namespace, name) == "Starting", op=operator)
    (pod,) = get_json(kubectl, "pods", "-n", namespace, "-l", f"{api.LABEL_ROLLOUT}={label}")["items"]
    assert len(pod["metadata"]["name"]) <= 63
    kubectl("delete", "swer", name, "-n", namespace, "--wait=false")
    wait_for(
        "rollout gone (the finalizer completed)",
        lambda: get_json(kubectl, "swer", name, "-n", namespace) is None,
        op=operator,
    )
    wait_for(
        "pod deleted",
        lambda: all(
            p["metadata"].get("deletionTimestamp") for p in get_json(kubectl, "pods", "-n", namespace)["items"]
        ),
        op=operator,
    )
