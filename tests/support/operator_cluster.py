"""Helpers for tests that drive a real operator process: rollout manifests, reads
through kubectl, playing the kubelet (pod readiness) and the runner (its token and
ingest URLs). Test modules import these from here, never from each other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.wire import ingest as wire
from swerollout_operator.tokens import TokenKey, TokenKind
from tests.support.operator import OperatorProcess


def rollout(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "labels": {api.LABEL_BATCH: "b1"}},
        "spec": {
            "instance": {
                "instanceId": f"demo__{name}",
                "repo": "demo/calc",
                "baseCommit": "abcdef0",
                "image": "registry.example/calc:1",
                "problemStatement": "fix it",
                "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
            },
            "inference": {"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"},
        },
    }
    body["spec"].update(spec)
    return body


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0, op: OperatorProcess | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"\noperator log:\n{op.log_tail()}" if op else ""))
        time.sleep(0.2)


def get_json(kubectl: Callable[..., Any], *args: str) -> Any:
    result = kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def phase(kubectl: Callable[..., Any], ns: str, name: str) -> str | None:
    obj = get_json(kubectl, "swer", name, "-n", ns)
    return ((obj or {}).get("status") or {}).get("phase")


def pods_of(kubectl: Callable[..., Any], ns: str, name: str) -> list[dict[str, Any]]:
    return get_json(kubectl, "pods", "-n", ns, "-l", f"{api.LABEL_ROLLOUT}={name}")["items"]


def mark_ready(kubectl: Callable[..., Any], ns: str, pod: str, ip: str = "10.1.2.3") -> None:
    status = {
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        }
    }
    kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def setup_rollout(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str, name: str, **spec: Any
) -> tuple[str, str]:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout(name, **spec)))
    wait_for("Starting", lambda: phase(kubectl, namespace, name) == "Starting", op=operator)
    uid = get_json(kubectl, "swer", name, "-n", namespace)["metadata"]["uid"]
    assert operator.key_file is not None
    token = TokenKey.from_file(operator.key_file).derive(TokenKind.INGEST, namespace, name, uid)
    return uid, token


def ingest_url(operator: OperatorProcess, namespace: str, name: str, uid: str, path: str) -> str:
    return f"{operator.ingest_url}{wire.API_PREFIX}/{namespace}/{name}/{uid}{path}"
