"""The generated CRD, applied to the real API server with the real kubectl.

Bad input must be rejected at `kubectl apply` time with a message that names the
field; every example must apply cleanly.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from swerollout.api import v1alpha1 as api

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.cluster


def base(name: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "instance": {
                "instanceId": "demo__calc-1",
                "repo": "demo/calc",
                "baseCommit": "0123456789abcdef0123456789abcdef01234567",
                "image": "registry.example/calc:1",
                "problemStatement": "add() is wrong",
            },
            "inference": {"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"},
        },
    }


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = obj
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(leaf)
    else:
        node[leaf] = value


_DELETE = object()

# (case id, path to change, new value, text the error must contain)
BAD_INPUTS: list[tuple[str, str, Any, str]] = [
    ("missing-instance", "spec.instance", _DELETE, "spec.instance: Required value"),
    ("missing-inference", "spec.inference", _DELETE, "spec.inference: Required value"),
    ("missing-problem", "spec.instance.problemStatement", _DELETE, "spec.instance.problemStatement: Required value"),
    ("bad-commit", "spec.instance.baseCommit", "not-a-sha", "spec.instance.baseCommit"),
    ("empty-instance-id", "spec.instance.instanceId", "", "spec.instance.instanceId"),
    ("relative-workdir", "spec.instance.workdir", "testbed", "spec.instance.workdir"),
    ("endpoint-scheme", "spec.inference.endpoint", "ftp://sglang:30000", "spec.inference.endpoint"),
    ("unknown-agent-kind", "spec.agent.kind", "SuperAgent", "spec.agent.kind: Unsupported value"),
    ("zero-turns", "spec.agent.maxTurns", 0, "spec.agent.maxTurns"),
    ("too-many-turns", "spec.agent.maxTurns", 5000, "spec.agent.maxTurns"),
    ("unknown-mode", "spec.mode", "eval", "spec.mode: Unsupported value"),
    ("negative-temperature", "spec.inference.sampling.temperature", -1, "spec.inference.sampling.temperature"),
    ("zero-top-p", "spec.inference.sampling.topP", 0, "spec.inference.sampling.topP"),
    ("tokenizer-required", "spec.inference.tokenizer", _DELETE, "spec.inference.tokenizer is required"),
    ("typo-field", "spec.agent.maxTurn", 10, 'unknown field "spec.agent.maxTurn"'),
    ("negative-keepalive", "spec.sandbox.keepAliveSecondsAfterAbort", -5, "spec.sandbox.keepAliveSecondsAfterAbort"),
    ("suspend-not-bool", "spec.suspend", "yes", "spec.suspend"),
    ("no-tools", "spec.agent.tools.enabled", [], "spec.agent.tools.enabled"),
    ("unknown-tool", "spec.agent.tools.enabled", ["python"], "spec.agent.tools.enabled[0]: Unsupported value"),
    ("bad-quantity", "spec.sandbox.resources.requests", {"cpu": "lots"}, "spec.sandbox.resources.requests.cpu"),
    ("unknown-parser", "spec.instance.evaluation.logParser", "junit", "spec.instance.evaluation.logParser"),
    ("short-startup", "spec.sandbox.startupTimeoutSeconds", 5, "spec.sandbox.startupTimeoutSeconds"),
    ("bad-toleration", "spec.sandbox.tolerations", [{"operator": "Sometimes"}], "spec.sandbox.tolerations[0].operator"),
]


@pytest.mark.parametrize("case, path, value, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_rejected_naming_the_field(
    kubectl: Callable[..., Any], namespace: str, case: str, path: str, value: Any, expected: str
) -> None:
    obj = base(f"bad-{case}")
    _set(obj, path, value)
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode != 0, f"{case} was accepted:\n{result.stdout}"
    assert expected in result.stderr, result.stderr
    # Nothing half-created.
    got = kubectl("get", "swer", f"bad-{case}", "-n", namespace, check=False)
    assert got.returncode != 0


def test_instance_and_mode_are_immutable(kubectl: Callable[..., Any], namespace: str) -> None:
    obj = base("immutable")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    changed = copy.deepcopy(obj)
    changed["spec"]["instance"]["repo"] = "demo/other"
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(changed), check=False)
    assert result.returncode != 0
    assert "spec.instance is immutable" in result.stderr
    changed = copy.deepcopy(obj)
    changed["spec"]["mode"] = "validate"
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(changed), check=False)
    assert result.returncode != 0
    assert "spec.mode is immutable" in result.stderr
    # suspend is meant to change.
    changed = copy.deepcopy(obj)
    changed["spec"]["suspend"] = True
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(changed))


def test_server_fills_defaults_from_the_models(kubectl: Callable[..., Any], namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(base("defaults")))
    stored = json.loads(kubectl("get", "swer", "defaults", "-n", namespace, "-o", "json").stdout)
    spec = stored["spec"]
    defaults = api.SWERolloutSpec.model_validate(base("x")["spec"]).to_wire()
    assert spec["agent"]["maxTurns"] == defaults["agent"]["maxTurns"] == 50
    assert spec["agent"]["tools"]["enabled"] == ["bash", "str_replace_editor", "submit"]
    assert spec["instance"]["workdir"] == "/testbed"
    assert spec["mode"] == "train" and spec["suspend"] is False
    assert spec["sandbox"]["keepAliveSecondsAfterAbort"] == defaults["sandbox"]["keepAliveSecondsAfterAbort"]
    # What the server stored parses back into the models unchanged.
    assert api.SWERolloutSpec.model_validate(spec).to_wire() == spec


def test_printer_columns_short_name_and_category(kubectl: Callable[..., Any], namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(base("columns")))
    header = kubectl("get", "swer", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "TURNS", "TOKENS", "REWARD", "AGE"]
    by_category = kubectl("get", "swerollout", "-n", namespace, "-o", "name").stdout
    assert "swerollout.swerollout.io/columns" in by_category
    explained = kubectl("explain", "swerollout.spec.sandbox.keepAliveSecondsAfterAbort").stdout
    assert "keep" in explained.lower() and "pod" in explained.lower()


def test_status_is_a_subresource(kubectl: Callable[..., Any], namespace: str) -> None:
    obj = base("status-sub")
    obj["status"] = {"phase": "Succeeded"}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    stored = json.loads(kubectl("get", "swer", "status-sub", "-n", namespace, "-o", "json").stdout)
    # The main resource ignores status; only the status subresource writes it.
    assert "phase" not in stored.get("status", {})
    patch = {"status": {"phase": "Running", "conditions": [
        {"type": "SandboxReady", "status": "True", "reason": "PodReady", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ]}}
    kubectl("patch", "swer", "status-sub", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch))
    stored = json.loads(kubectl("get", "swer", "status-sub", "-n", namespace, "-o", "json").stdout)
    assert stored["status"]["phase"] == "Running"
    bad = {"status": {"phase": "Exploded"}}
    result = kubectl(
        "patch", "swer", "status-sub", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(bad), check=False
    )
    assert result.returncode != 0 and "status.phase" in result.stderr


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_applies_cleanly(kubectl: Callable[..., Any], namespace: str, example: Path) -> None:
    result = kubectl("apply", "-n", namespace, "-f", str(example), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    for doc in yaml.safe_load_all(example.read_text()):
        if doc and doc.get("kind") == api.KIND:
            api.SWERollout.model_validate(doc)
