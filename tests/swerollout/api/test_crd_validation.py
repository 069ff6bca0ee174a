"""The generated CRD, applied to the real API server with the real kubectl.

Bad input must be rejected at `kubectl apply` time with a message that names the
field; every example must apply cleanly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from swerollout.api import v1alpha1 as api

ROOT = Path(__file__).resolve().parents[3]
cluster = pytest.mark.cluster


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
                "evaluation": {"failToPass": ["tests/test_calc.py::test_add[two words]"]},
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
_RES = "spec.sandbox.resources"

# (case id, path to change, new value, text the API server's error must contain).
# Every case is also refused by the pydantic models (the client validates with them).
BAD_INPUTS: list[tuple[str, str, Any, str]] = [
    ("missing-instance", "spec.instance", _DELETE, "spec.instance: Required value"),
    ("missing-inference", "spec.inference", _DELETE, "spec.inference: Required value"),
    ("missing-problem", "spec.instance.problemStatement", _DELETE, "spec.instance.problemStatement: Required value"),
    ("bad-commit", "spec.instance.baseCommit", "not-a-sha", "spec.instance.baseCommit"),
    ("uppercase-commit", "spec.instance.baseCommit", "ABCDEF0", "spec.instance.baseCommit"),
    ("empty-instance-id", "spec.instance.instanceId", "", "spec.instance.instanceId"),
    ("dotdot-instance-id", "spec.instance.instanceId", "../etc", "spec.instance.instanceId"),
    ("relative-workdir", "spec.instance.workdir", "testbed", "spec.instance.workdir"),
    ("image-with-space", "spec.instance.image", "registry.example/calc 1", "spec.instance.image: Invalid value"),
    ("image-uppercase-path", "spec.instance.image", "registry.example/Calc:1", "spec.instance.image: Invalid value"),
    ("image-bad-tag", "spec.instance.image", "registry.example/calc:", "spec.instance.image: Invalid value"),
    (
        "problem-too-long",
        "spec.instance.problemStatement",
        "x" * (256 * 1024 + 1),
        "spec.instance.problemStatement: Too long",
    ),
    ("issue-image-not-url", "spec.instance.issueImages", ["a screenshot of the bug"], "spec.instance.issueImages[0]"),
    ("issue-image-no-host", "spec.instance.issueImages", ["http:///shot.png"], "spec.instance.issueImages[0]"),
    (
        "issue-image-bad-port",
        "spec.instance.issueImages",
        ["https://img.example:99999/a.png"],
        "spec.instance.issueImages[0]",
    ),
    ("unknown-parser", "spec.instance.evaluation.logParser", "junit", "spec.instance.evaluation.logParser"),
    ("unknown-eval-type", "spec.instance.evaluation.evalType", "all", "spec.instance.evaluation.evalType"),
    ("empty-test-id", "spec.instance.evaluation.failToPass", [""], "spec.instance.evaluation.failToPass[0]"),
    ("reward-nothing-to-grade", "spec.instance.evaluation.failToPass", _DELETE, "spec.reward.enabled: Invalid value"),
    ("endpoint-scheme", "spec.inference.endpoint", "ftp://sglang:30000", "spec.inference.endpoint"),
    ("endpoint-port-range", "spec.inference.endpoint", "http://h:99999", "spec.inference.endpoint: Invalid value"),
    ("endpoint-port-zero", "spec.inference.endpoint", "http://h:0", "spec.inference.endpoint: Invalid value"),
    ("endpoint-no-host", "spec.inference.endpoint", "http:///generate", "spec.inference.endpoint: Invalid value"),
    ("endpoint-space", "spec.inference.endpoint", "http://sglang :30000", "spec.inference.endpoint: Invalid value"),
    ("tokenizer-required", "spec.inference.tokenizer", _DELETE, "spec.inference.tokenizer is required"),
    ("negative-temperature", "spec.inference.sampling.temperature", -1, "spec.inference.sampling.temperature"),
    ("zero-top-p", "spec.inference.sampling.topP", 0, "spec.inference.sampling.topP"),
    ("zero-top-k", "spec.inference.sampling.topK", 0, "spec.inference.sampling.topK: Invalid value"),
    ("top-k-below-minus-one", "spec.inference.sampling.topK", -2, "spec.inference.sampling.topK"),
    ("zero-max-new-tokens", "spec.inference.sampling.maxNewTokens", 0, "spec.inference.sampling.maxNewTokens"),
    ("empty-stop-string", "spec.inference.sampling.stop", [""], "spec.inference.sampling.stop[0]"),
    ("negative-seed", "spec.inference.sampling.seed", -1, "spec.inference.sampling.seed"),
    ("tiny-context", "spec.inference.maxContextTokens", 100, "spec.inference.maxContextTokens"),
    ("unknown-agent-kind", "spec.agent.kind", "SuperAgent", "spec.agent.kind: Unsupported value"),
    ("zero-turns", "spec.agent.maxTurns", 0, "spec.agent.maxTurns"),
    ("too-many-turns", "spec.agent.maxTurns", 5000, "spec.agent.maxTurns"),
    ("too-many-requeries", "spec.agent.maxRequeries", 21, "spec.agent.maxRequeries"),
    ("zero-command-timeout", "spec.agent.commandTimeoutSeconds", 0, "spec.agent.commandTimeoutSeconds"),
    (
        "template-too-long",
        "spec.agent.templates.systemTemplate",
        "x" * (16 * 1024 + 1),
        "spec.agent.templates.systemTemplate: Too long",
    ),
    ("typo-field", "spec.agent.maxTurn", 10, 'unknown field "spec.agent.maxTurn"'),
    ("no-tools", "spec.agent.tools.enabled", [], "spec.agent.tools.enabled"),
    ("unknown-tool", "spec.agent.tools.enabled", ["python"], "spec.agent.tools.enabled[0]: Unsupported value"),
    (
        "duplicate-tools",
        "spec.agent.tools.enabled",
        ["bash", "bash", "submit"],
        "spec.agent.tools.enabled[1]: Duplicate value",
    ),
    (
        "no-submit-tool",
        "spec.agent.tools.enabled",
        ["bash", "str_replace_editor"],
        "spec.agent.tools.enabled: Invalid value",
    ),
    ("env-not-a-shell-name", "spec.agent.tools.env", {"1 BAD": "x"}, "spec.agent.tools.env: Invalid value"),
    (
        "duplicate-blocklist",
        "spec.agent.tools.blocklist",
        ["vim", "vim"],
        "spec.agent.tools.blocklist[1]: Duplicate value",
    ),
    ("unknown-mode", "spec.mode", "eval", "spec.mode: Unsupported value"),
    ("suspend-not-bool", "spec.suspend", "yes", "spec.suspend"),
    ("negative-keepalive", "spec.sandbox.keepAliveSecondsAfterAbort", -5, "spec.sandbox.keepAliveSecondsAfterAbort"),
    ("short-startup", "spec.sandbox.startupTimeoutSeconds", 5, "spec.sandbox.startupTimeoutSeconds"),
    ("bad-quantity", f"{_RES}.requests", {"cpu": "lots"}, f"{_RES}.requests[cpu]: Invalid value"),
    ("quantity-two-dots", f"{_RES}.requests", {"memory": "1.2.3Gi"}, f"{_RES}.requests[memory]: Invalid value"),
    ("quantity-negative", f"{_RES}.limits", {"memory": "-4Gi"}, f"{_RES}.limits[memory]: Invalid value"),
    ("quantity-negative-int", f"{_RES}.requests", {"cpu": -1}, f"{_RES}.requests[cpu]: Invalid value"),
    ("quantity-bad-suffix", f"{_RES}.limits", {"memory": "4GB"}, f"{_RES}.limits[memory]: Invalid value"),
    ("resource-name-typo", f"{_RES}.requests", {"memroy": "1Gi"}, f"{_RES}.requests: Invalid value"),
    (
        "request-above-limit",
        _RES,
        {"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}},
        f"{_RES}: Invalid value",
    ),
    (
        "cpu-request-above-int-limit",
        _RES,
        {"requests": {"cpu": "1500m"}, "limits": {"cpu": 1}},
        f"{_RES}: Invalid value",
    ),
    (
        "eval-request-above-limit",
        "spec.reward.resources",
        {"requests": {"cpu": 2}, "limits": {"cpu": "1"}},
        "spec.reward.resources: Invalid value",
    ),
    ("node-selector-key", "spec.sandbox.nodeSelector", {"bad key!": "x"}, "spec.sandbox.nodeSelector: Invalid value"),
    (
        "node-selector-value",
        "spec.sandbox.nodeSelector",
        {"disk": "not ok!"},
        "spec.sandbox.nodeSelector[disk]: Invalid value",
    ),
    ("bad-toleration", "spec.sandbox.tolerations", [{"operator": "Sometimes"}], "spec.sandbox.tolerations[0].operator"),
    (
        "toleration-exists-with-value",
        "spec.sandbox.tolerations",
        [{"key": "gpu", "operator": "Exists", "value": "a100"}],
        "spec.sandbox.tolerations[0]: Invalid value",
    ),
    (
        "toleration-no-key-equal",
        "spec.sandbox.tolerations",
        [{"operator": "Equal", "value": "x"}],
        "spec.sandbox.tolerations[0]: Invalid value",
    ),
    (
        "toleration-seconds-not-noexecute",
        "spec.sandbox.tolerations",
        [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
        "spec.sandbox.tolerations[0]: Invalid value",
    ),
    (
        "toleration-bad-key",
        "spec.sandbox.tolerations",
        [{"key": "bad key", "operator": "Exists"}],
        "spec.sandbox.tolerations[0].key: Invalid value",
    ),
    (
        "runtime-class-name",
        "spec.sandbox.runtimeClassName",
        "Not_Valid",
        "spec.sandbox.runtimeClassName: Invalid value",
    ),
    (
        "pull-secret-name",
        "spec.sandbox.imagePullSecrets",
        ["My Secret"],
        "spec.sandbox.imagePullSecrets[0]: Invalid value",
    ),
    (
        "pull-secret-duplicate",
        "spec.sandbox.imagePullSecrets",
        ["regcred", "regcred"],
        "spec.sandbox.imagePullSecrets[1]: Duplicate value",
    ),
    ("short-reward-timeout", "spec.reward.timeoutSeconds", 5, "spec.reward.timeoutSeconds"),
    (
        "api-key-secret-name",
        "spec.inference.apiKeySecretRef",
        {"name": "My Keys", "key": "api-key"},
        "spec.inference.apiKeySecretRef.name: Invalid value",
    ),
    (
        "admin-key-secret-key",
        "spec.inference.adminKeySecretRef",
        {"name": "keys", "key": "admin key"},
        "spec.inference.adminKeySecretRef.key: Invalid value",
    ),
    (
        "api-key-ref-without-key",
        "spec.inference.apiKeySecretRef",
        {"name": "keys"},
        "spec.inference.apiKeySecretRef.key: Required value",
    ),
]


def _bad(case: str, path: str, value: Any) -> dict[str, Any]:
    obj = base(f"bad-{case}")
    _set(obj, path, value)
    return obj


@cluster
@pytest.mark.parametrize("case, path, value, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_rejected_naming_the_field(
    kubectl: Callable[..., Any], namespace: str, case: str, path: str, value: Any, expected: str
) -> None:
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_bad(case, path, value)), check=False)
    assert result.returncode != 0, f"{case} was accepted:\n{result.stdout}"
    assert expected in result.stderr, result.stderr
    # Only the broken field is reported: the base object is valid. (Client-side apply adds
    # its annotation's size error for the oversized case, and the API server a note that
    # it skipped CEL rules after a schema error.)
    others = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("* ")
        and expected not in line
        and not line.startswith(("* <nil>", "* metadata.annotations: Too long"))
    ]
    assert not others, result.stderr
    # Nothing half-created.
    got = kubectl("get", "swer", f"bad-{case}", "-n", namespace, check=False)
    assert got.returncode != 0


def test_at_least_forty_malformed_specs() -> None:
    assert len(BAD_INPUTS) >= 40


@pytest.mark.parametrize("case, path, value, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_the_models_refuse_what_the_api_server_refuses(case: str, path: str, value: Any, expected: str) -> None:
    """The client validates with the models before submitting: same verdict, same field."""
    with pytest.raises(ValidationError) as info:
        api.SWERollout.model_validate(_bad(case, path, value))
    assert path.rsplit(".", 1)[-1] in str(info.value), str(info.value)


def _good(**changes: Any) -> dict[str, Any]:
    obj = base("good")
    for path, value in changes.items():
        _set(obj, "spec." + path.replace("__", "."), value)
    return obj


_DIGEST = "sha256:" + "0123456789abcdef" * 4
# Written the way core/v1 users write them; all must be accepted by both sides.
GOOD_INPUTS: list[tuple[str, dict[str, Any]]] = [
    (
        "int-cpu",
        _good(sandbox__resources={"requests": {"cpu": 2, "memory": "1Gi"}, "limits": {"cpu": 4, "memory": "2Gi"}}),
    ),
    (
        "equal-in-other-units",
        _good(
            sandbox__resources={
                "requests": {"memory": "1024Mi", "cpu": "0.5"},
                "limits": {"memory": "1Gi", "cpu": "500m"},
            }
        ),
    ),
    (
        "exponent-and-extended",
        _good(
            sandbox__resources={
                "requests": {"memory": "1e9", "hugepages-2Mi": "64Mi"},
                "limits": {"nvidia.com/gpu": 1, "memory": "1Gi", "hugepages-2Mi": "64Mi"},
            }
        ),
    ),
    (
        "tolerations",
        _good(
            sandbox__tolerations=[
                {"operator": "Exists"},
                {"key": "example.com/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
            ]
        ),
    ),
    (
        "placement",
        _good(
            sandbox__nodeSelector={"kubernetes.io/arch": "amd64", "pool": ""},
            sandbox__runtimeClassName="gvisor",
            sandbox__imagePullSecrets=["regcred", "ghcr.creds"],
        ),
    ),
    ("image-with-port-and-digest", _good(instance__image=f"localhost:5000/org/sweb.eval.x86_64.calc__1@{_DIGEST}")),
    ("image-bare-name", _good(instance__image="ubuntu")),
    ("image-dev-repo", _good(instance__image="file:///tmp/swerollout-tasks/calc")),
    ("endpoint-ipv6", _good(inference__endpoint="http://[::1]:30000")),
    ("endpoint-path", _good(inference__endpoint="https://sglang.inference.svc.cluster.local:65535/v1")),
    ("top-k-one", _good(inference__sampling={"topK": 1})),
    (
        "issue-images",
        _good(instance__issueImages=["https://img.example/shot.png", "data:image/png;base64,iVBORw0KGgo="]),
    ),
    ("no-reward-no-tests", _good(instance__evaluation={}, reward={"enabled": False})),
    (
        "inference-keys",
        _good(
            inference__apiKeySecretRef={"name": "sglang-keys", "key": "api-key"},
            inference__adminKeySecretRef={"name": "sglang.admin", "key": "ADMIN_key.txt"},
        ),
    ),
    ("pass-to-pass-only", _good(instance__evaluation={"passToPass": ["tests/test_calc.py::test_sub"]})),
]


@cluster
@pytest.mark.parametrize("case, obj", GOOD_INPUTS, ids=[c[0] for c in GOOD_INPUTS])
def test_core_v1_style_input_is_accepted(
    kubectl: Callable[..., Any], namespace: str, case: str, obj: dict[str, Any]
) -> None:
    result = kubectl(
        "apply", "-n", namespace, "-f", "-", "--dry-run=server", "-o", "json", input=json.dumps(obj), check=False
    )
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)["spec"]
    # The server keeps what was written (`cpu: 2` stays an integer) and it parses back unchanged.
    assert api.SWERolloutSpec.model_validate(stored).to_wire() == stored
    assert api.SWERollout.model_validate(obj).spec.to_wire() == api.SWERolloutSpec.model_validate(stored).to_wire()


def _largest(name: str) -> dict[str, Any]:
    """A rollout with every text at its bound: the instance's texts at their shared limit."""
    obj = base(name)
    instance = obj["spec"]["instance"]
    statement = 256 * api.KiB
    instance["problemStatement"] = "p" * statement
    tests = [f"tests/test_{i:05d}.py::test_case[{'x' * 1000}]" for i in range(64)]
    used = statement + sum(map(len, tests))
    instance["evaluation"] = {"failToPass": tests, "evalScript": "e" * (32 * api.KiB)}
    used += 32 * api.KiB
    instance["evaluation"]["testPatch"] = "t" * (api.INSTANCE_TEXT_LIMIT - used)
    templates = [api.Templates.model_fields[t].alias for t in api.Templates.model_fields]
    assert len(templates) == 8
    obj["spec"]["agent"] = {
        "templates": {t: "{{ problem_statement }}" + "s" * (16 * api.KiB - 23) for t in templates},
        "tools": {
            "blocklist": [f"{i:03d}" + "b" * 253 for i in range(64)],
            "blocklistStandalone": [f"{i:03d}" + "s" * 253 for i in range(64)],
            "env": {f"V{i:02d}" + "_" * 125: "e" * 512 for i in range(32)},
        },
    }
    obj["spec"]["inference"]["sampling"] = {"stop": [f"{i:02d}" + "s" * 254 for i in range(16)]}
    return obj


@cluster
def test_the_largest_rollout_applies_server_side_and_stays_under_one_mib(
    kubectl: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    obj = _largest("largest")
    api.SWERollout.model_validate(obj)
    # Client-side apply copies the object into an annotation limited to 256 KiB: the
    # documented hint (and the troubleshooting table) says to apply with --server-side.
    client_side = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)
    assert client_side.returncode != 0 and "metadata.annotations: Too long" in client_side.stderr
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=json.dumps(obj))
    # One more character in the instance's texts is refused, by both sides, with the hint.
    over = _largest("over")
    over["spec"]["instance"]["evaluation"]["testPatch"] += "t"
    result = kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=json.dumps(over), check=False)
    assert result.returncode != 0 and "spec.instance: Invalid value" in result.stderr, result.stderr
    assert "--server-side" in result.stderr
    with pytest.raises(ValidationError, match="512 KiB together"):
        api.SWERollout.model_validate(over)
    # The status at its bounds too: conditions with the longest messages.
    conditions = [
        {
            "type": f"Condition{i}",
            "status": "True",
            "reason": "R" * 1024,
            "message": "m" * 32768,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        for i in range(8)
    ]
    status = {"status": {"phase": "Failed", "message": "m" * 32768, "conditions": conditions}}
    patch = tmp_path / "status.json"
    patch.write_text(json.dumps(status))
    kubectl(
        "patch", "swer", "largest", "-n", namespace, "--subresource=status", "--type=merge", "--patch-file", str(patch)
    )
    stored = kubectl("get", "swer", "largest", "-n", namespace, "-o", "json").stdout
    size = len(stored.encode())
    assert 900 * api.KiB < size < 1024 * api.KiB, size  # etcd refuses requests over 1.5 MiB


@cluster
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


@cluster
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


@cluster
def test_printer_columns_short_name_and_category(kubectl: Callable[..., Any], namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(base("columns")))
    header = kubectl("get", "swer", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "TURNS", "TOKENS", "REWARD", "AGE"]
    by_category = kubectl("get", "rl", "-n", namespace, "-o", "name").stdout
    assert "swerollout.swerollout.io/columns" in by_category
    # The singular name stays one resource whatever else shares the category.
    one = json.loads(kubectl("get", "swerollout", "columns", "-n", namespace, "-o", "json").stdout)
    assert one["kind"] == "SWERollout" and one["metadata"]["name"] == "columns"
    explained = kubectl("explain", "swerollout.spec.sandbox.keepAliveSecondsAfterAbort").stdout
    assert "keep" in explained.lower() and "pod" in explained.lower()


@cluster
def test_status_is_a_subresource(kubectl: Callable[..., Any], namespace: str) -> None:
    obj = base("status-sub")
    obj["status"] = {"phase": "Succeeded"}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    stored = json.loads(kubectl("get", "swer", "status-sub", "-n", namespace, "-o", "json").stdout)
    # The main resource ignores status; only the status subresource writes it.
    assert "phase" not in stored.get("status", {})
    patch = {
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "SandboxReady",
                    "status": "True",
                    "reason": "PodReady",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
            ],
        }
    }
    kubectl(
        "patch", "swer", "status-sub", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
    )
    stored = json.loads(kubectl("get", "swer", "status-sub", "-n", namespace, "-o", "json").stdout)
    assert stored["status"]["phase"] == "Running"
    bad = {"status": {"phase": "Exploded"}}
    result = kubectl(
        "patch",
        "swer",
        "status-sub",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(bad),
        check=False,
    )
    assert result.returncode != 0 and "status.phase" in result.stderr


@cluster
@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_applies_cleanly(kubectl: Callable[..., Any], namespace: str, example: Path) -> None:
    result = kubectl("apply", "-n", namespace, "-f", str(example), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    for doc in yaml.safe_load_all(example.read_text()):
        if doc and doc.get("kind") == api.KIND:
            api.SWERollout.model_validate(doc)


@cluster
def test_batch_object_defaults_bounds_and_name(kubectl: Callable[..., Any], namespace: str) -> None:
    def batch(name: str, **spec: Any) -> str:
        return json.dumps(
            {"apiVersion": api.API_VERSION, "kind": api.BATCH_KIND, "metadata": {"name": name}, "spec": spec}
        )

    kubectl("apply", "-n", namespace, "-f", "-", input=batch("step-1"))
    stored = json.loads(kubectl("get", "swerb", "step-1", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"] == {"suspend": False}
    assert api.SWERolloutBatch.model_validate(stored).spec.suspend is False
    refused = kubectl("apply", "-n", namespace, "-f", "-", input=batch("step-2", suspend="yes"), check=False)
    assert refused.returncode != 0 and "spec.suspend" in refused.stderr, refused.stderr
    too_long = kubectl("apply", "-n", namespace, "-f", "-", input=batch("b" * 64), check=False)
    assert too_long.returncode != 0 and "label value" in too_long.stderr, too_long.stderr
