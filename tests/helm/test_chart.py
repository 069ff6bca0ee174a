"""The Helm chart: lint, render with default and non-default values, install for real."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from swerollout.api import crdgen
from swerollout_dev.binaries import find_binaries
from swerollout_dev.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "swerollout"


@pytest.fixture(scope="module")
def helm_bin() -> Callable[..., Any]:
    import subprocess

    binary = str(find_binaries().helm)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    return run


def render(helm_bin: Callable[..., Any], *values: str) -> list[dict[str, Any]]:
    out = helm_bin("template", "rel", str(CHART), "--namespace", "swer-system", *values).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_lint_passes_strict(helm_bin: Callable[..., Any]) -> None:
    result = helm_bin("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout


def test_chart_crd_is_the_generated_one() -> None:
    assert (CHART / "crds" / crdgen.CRD_FILENAME).read_text() == crdgen.render()


def test_default_render_is_namespaced_least_privilege(helm_bin: Callable[..., Any]) -> None:
    docs = render(helm_bin)
    kinds = {d["kind"] for d in docs}
    assert {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "Secret",
        "PersistentVolumeClaim",
    } <= kinds
    assert "ServiceMonitor" not in kinds
    # The only cluster-scoped grant is the TokenReview/SubjectAccessReview delegation.
    (cluster_role,) = by_kind(docs, "ClusterRole")
    assert {r["resources"][0] for r in cluster_role["rules"]} == {"tokenreviews", "subjectaccessreviews"}
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "swer-system"
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        if rule["resources"] == ["secrets"]:
            assert set(rule["verbs"]) == {"get", "create", "delete"}
        if rule["resources"] == ["swerolloutbatches"]:
            # A batch's spec is its users' alone: the operator reads it and never writes it.
            assert set(rule["verbs"]) == {"get", "list", "watch"}
    assert any(r["resources"] == ["swerolloutbatches"] for r in role["rules"])

    (deploy,) = by_kind(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert "--namespaces=swer-system" in container["args"]
    assert pod["serviceAccountName"] == by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]
    ports = {p["name"]: p["port"] for p in by_kind(docs, "Service")[0]["spec"]["ports"]}
    assert ports == {"metrics": 8080, "ingest": 8081}


def test_rollout_pods_get_a_network_policy_reaching_only_the_operator_sglang_and_dns(
    helm_bin: Callable[..., Any],
) -> None:
    from swerollout_operator import podspec

    docs = render(
        helm_bin, "--set", "rbac.watchNamespaces={team-a}", "--set", "networkPolicy.sglang.ports={30000,30001}"
    )
    policies = {d["metadata"]["namespace"]: d["spec"] for d in by_kind(docs, "NetworkPolicy")}
    assert set(policies) == {"swer-system", "team-a"}
    spec = policies["team-a"]
    # selects the pods the operator creates (labels from the operator's own pod builder)
    from swerollout.api import v1alpha1 as api

    labels = podspec._labels({"name": "r"}, "rollout")
    assert all(labels.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items())
    (expr,) = spec["podSelector"]["matchExpressions"]
    assert expr["key"] == api.LABEL_COMPONENT and set(expr["values"]) == {"rollout", "eval"}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    operator_rule, sglang_rule, dns_rule = spec["egress"]
    (peer,) = operator_rule["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "swer-system"}
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert operator_rule["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert [p["port"] for p in sglang_rule["ports"]] == [30000, 30001]
    assert {p["port"] for p in dns_rule["ports"]} == {53}
    assert "NetworkPolicy" not in {d["kind"] for d in render(helm_bin, "--set", "networkPolicy.enabled=false")}


def test_operator_args_parse(helm_bin: Callable[..., Any]) -> None:
    """The args the chart renders are accepted by the operator's own parser."""
    from swerollout_operator.__main__ import parse_args

    for values in ([], ["--set", "rbac.clusterWide=true", "--set", "operator.keepFailedPods=true"]):
        (deploy,) = by_kind(render(helm_bin, *values), "Deployment")
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        settings, _, _ = parse_args(args)
        assert settings.ingest_port == 8081 and settings.store_url == "file:///data"
        # Flags carry the settings' own names, so every value lands where the chart meant it.
        assert settings.cluster_wide is settings.keep_failed_pods is bool(values)
        assert settings.default_queue_name is None, "no Kueue unless a queue is named"
        assert settings.namespaces == ([] if values else ["swer-system"])
    (deploy,) = by_kind(
        render(
            helm_bin,
            "--set",
            "store.type=s3",
            "--set",
            "store.s3.bucket=b",
            "--set-json",
            'operator.podTolerations=[{"key":"gpu","operator":"Exists"}]',
            "--set-json",
            'operator.podNodeSelector={"pool":"rl"}',
            "--set",
            "operator.queueName=team-a",
        ),
        "Deployment",
    )
    settings, _, _ = parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert settings.default_queue_name == "team-a"
    assert settings.store_url == "s3://b/swerollout/"
    assert settings.extra_tolerations == [{"key": "gpu", "operator": "Exists"}]
    assert settings.extra_node_selector == {"pool": "rl"}


def test_non_default_values(helm_bin: Callable[..., Any]) -> None:
    docs = render(
        helm_bin,
        "--set",
        "rbac.clusterWide=true",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "store.type=s3",
        "--set",
        "store.s3.bucket=rollouts",
        "--set",
        "resultsEndpoint.enabled=false",
        "--set",
        "grafanaDashboard.enabled=false",
    )
    kinds = [d["kind"] for d in docs]
    assert "Role" not in kinds and "PersistentVolumeClaim" not in kinds
    (cluster_role,) = by_kind(docs, "ClusterRole")
    assert any(r["resources"] == ["pods"] for r in cluster_role["rules"])
    assert by_kind(docs, "ServiceMonitor")[0]["spec"]["endpoints"][0]["port"] == "metrics"
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--cluster-wide" in args and "--store-url=s3://rollouts/swerollout/" in args

    extra = render(helm_bin, "--set", "rbac.watchNamespaces={team-a,team-b}")
    assert sorted(r["metadata"]["namespace"] for r in by_kind(extra, "Role")) == ["swer-system", "team-a", "team-b"]


@pytest.mark.parametrize(
    "values, message",
    [
        (["--set", "store.type=nfs"], "/store/type"),
        (["--set", "service.ingestPort=70000"], "/service/ingestPort"),
        (["--set", "operator.logLevel=LOUD"], "/operator/logLevel"),
        (["--set", "store.type=s3"], "store.s3.bucket is required"),
        (["--set", "unknownKey=1"], "unknownKey"),
        (["--set", "operator.replicas=2"], "operator.replicas > 1 needs operator.shards"),
        (["--set", "operator.replicas=2", "--set", "operator.shards=2"], "needs store.type s3"),
        (["--set", "operator.shards=65"], "/operator/shards"),
    ],
)
def test_bad_values_are_rejected_with_the_key(helm_bin: Callable[..., Any], values: list[str], message: str) -> None:
    result = helm_bin("template", "rel", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_install_into_the_control_plane_and_upgrade_keeps_the_token_key(
    control_plane: ControlPlane, namespace: str
) -> None:
    release = f"swerollout-{secrets.token_hex(3)}"
    result = control_plane.helm("install", release, str(CHART), "-n", namespace, "--wait=false")
    assert result.returncode == 0, result.stderr
    # The NOTES' CRD upgrade step restarts the Deployment this release really has (checked below).
    assert f"kubectl -n {namespace} rollout restart deployment/{release}" in result.stdout, result.stdout
    for kind, name in [
        ("serviceaccount", release),
        ("role", release),
        ("rolebinding", release),
        ("deployment", release),
        ("service", release),
        ("secret", f"{release}-token-key"),
        ("crd", "swerollouts.swerollout.io"),
    ]:
        ns_args = [] if kind == "crd" else ["-n", namespace]
        got = control_plane.kubectl("get", kind, name, *ns_args, "-o", "json")
        assert got.returncode == 0, f"{kind}/{name} missing: {got.stderr}"
    key_before = json.loads(
        control_plane.kubectl("get", "secret", f"{release}-token-key", "-n", namespace, "-o", "json").stdout
    )
    assert len(base64.b64decode(key_before["data"]["key"])) >= 32

    result = control_plane.helm(
        "upgrade", release, str(CHART), "-n", namespace, "--set", "operator.logLevel=DEBUG", "--wait=false"
    )
    assert result.returncode == 0, result.stderr
    key_after = json.loads(
        control_plane.kubectl("get", "secret", f"{release}-token-key", "-n", namespace, "-o", "json").stdout
    )
    assert key_after["data"]["key"] == key_before["data"]["key"]
    status = control_plane.helm("status", release, "-n", namespace)
    assert "deployed" in status.stdout
    uninstall = control_plane.helm("uninstall", release, "-n", namespace, "--wait=false")
    assert uninstall.returncode == 0, uninstall.stderr


def test_documented_crd_upgrade_command_works(control_plane: ControlPlane, helm_bin: Callable[..., Any]) -> None:
    """README: `helm show crds ... | kubectl apply --server-side --force-conflicts -f -`."""
    crds = helm_bin("show", "crds", str(CHART)).stdout
    result = control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
    assert result.returncode == 0, result.stderr
    # Both CRDs: helm prints the files back to back, each starts its own document.
    assert "swerollouts.swerollout.io" in result.stdout and "swerolloutbatches.swerollout.io" in result.stdout


def test_sharded_replicas_get_leases_in_their_namespace_only(helm_bin: Callable[..., Any]) -> None:
    """operator.replicas and operator.shards: the replicas, the flags that name each pod to the
    Leases (parsed by the operator's own parser), and RBAC for Leases: its own namespace, no
    delete or watch. Without shards, no Lease rule at all."""
    from swerollout_operator.__main__ import parse_args

    sharded = ["--set", "operator.replicas=3", "--set", "operator.shards=8"]
    docs = render(helm_bin, *sharded, "--set", "store.type=s3", "--set", "store.s3.bucket=b")
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 3 and deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    settings, _, _ = parse_args(container["args"])
    assert settings.shards == 8 and settings.replica_id == "$(POD_NAME)"
    assert settings.advertise_url == "http://$(POD_IP):8081"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert env["POD_NAME"] == "metadata.name" and env["POD_IP"] == "status.podIP"
    lease_rules = [
        (role["metadata"]["namespace"], rule)
        for role in by_kind(docs, "Role") + by_kind(docs, "ClusterRole")
        for rule in role["rules"]
        if "leases" in rule["resources"]
    ]
    assert lease_rules == [
        (
            "swer-system",
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "create", "update"],
            },
        )
    ]
    plain = render(helm_bin)
    assert not any("leases" in rule["resources"] for role in by_kind(plain, "Role") for rule in role["rules"])
    (single,) = by_kind(plain, "Deployment")
    assert single["spec"]["replicas"] == 1 and single["spec"]["strategy"]["type"] == "Recreate"
    assert parse_args(single["spec"]["template"]["spec"]["containers"][0]["args"])[0].shards == 0
