"""The rollout lifecycle on the real node: the chart's Deployment running the operator
from the image built from our Dockerfile, rollout pods started by the kubelet from the
task images, runners reaching the operator through its Service and cluster DNS."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from swerollout.api import v1alpha1 as api
from swerollout_dev.binaries import find_binaries
from swerollout_dev.cluster.buildimage import IMAGE
from swerollout_dev.cluster.supervisor import POLICY_PORT, RELEASE, RELEASE_NAMESPACE
from swerollout_dev.policy_server.launch import launch
from tests.support.docblocks import blocks_run_by
from tests.support.realnode import TERMINAL, RealNode, Rollouts

ROOT = Path(__file__).resolve().parents[2]
SLOW_AGENT = {"maxTurns": 6, "maxRequeries": 20}
# Loading the tokenizer took over 180 s with the machine's load at 40 (tests/cluster runs beside the rest).
POLICY_READY = 900.0
SLOW_INFERENCE = {"sampling": {"maxNewTokens": 24, "temperature": 1.0}}


@pytest.fixture(scope="module")
def oracle_url(real_node: RealNode) -> str:
    return f"http://{real_node.config.node_ip}:{POLICY_PORT}"


@pytest.fixture(scope="module")
def null_policy(real_node: RealNode) -> Iterator[str]:
    # On the node IP: pods reach it there, and nothing outside this machine does.
    with launch(
        "null", subprocess=True, ready_timeout=POLICY_READY, tokenizer="qwen-2.5", host=real_node.config.node_ip
    ) as server:
        yield server.url


@pytest.fixture(scope="module")
def slow_policy(real_node: RealNode) -> Iterator[str]:
    """tiny-lm (real sampling) slowed down so suspensions land mid-generation."""
    with launch(
        "tiny-lm",
        subprocess=True,
        ready_timeout=POLICY_READY,
        tokenizer="qwen-2.5",
        host=real_node.config.node_ip,
        weight_version="v1",
        faults={"delay_per_token": 0.08},
    ) as server:
        yield server.url


@pytest.fixture
def rollouts(real_node: RealNode, pod_namespace: str) -> Rollouts:
    return Rollouts(real_node, pod_namespace)


def _generating(rollouts: Rollouts, name: str) -> None:
    rollouts.node.wait_for(
        f"{name} generating", lambda: (rollouts.status(name).get("progress") or {}).get("turns", 0) >= 1, timeout=300
    )


def test_the_chart_runs_the_operator_from_our_image(real_node: RealNode) -> None:
    releases = json.loads(helm(real_node, "list", "-A", "-o", "json"))
    assert [(r["name"], r["namespace"], r["status"]) for r in releases] == [(RELEASE, RELEASE_NAMESPACE, "deployed")]
    deployment = real_node.get("deployment", RELEASE, "-n", RELEASE_NAMESPACE)
    assert deployment["status"].get("readyReplicas") == 1
    pods = real_node.get("pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=swerollout")["items"]
    running = [p for p in pods if p["status"]["phase"] == "Running"]
    assert len(running) == 1
    (container,) = running[0]["status"]["containerStatuses"]
    assert container["image"].endswith(IMAGE) and container["ready"] is True
    # The operator authenticates in-cluster with its ServiceAccount's projected token.
    assert running[0]["spec"]["serviceAccountName"] == "swerollout"


def helm(node: RealNode, *args: str) -> str:
    proc = subprocess.run(
        [str(find_binaries().helm), f"--kubeconfig={node.paths.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


THIS_TEST = "tests/cluster/test_rollouts.py::test_the_readme_real_cluster_section_step_by_step"


def readme_steps() -> list[str]:
    """The commands of the README's real-cluster block, comments dropped; docs/real-node.md
    shows the same commands (with its own comments)."""
    (readme,) = blocks_run_by("README.md", THIS_TEST)
    (docs,) = blocks_run_by("docs/real-node.md", THIS_TEST)
    assert docs.commands() == readme.commands(), "docs/real-node.md's block differs from the README's"
    return readme.commands()


def test_the_readme_real_cluster_section_step_by_step(real_node: RealNode) -> None:
    """Each command of the README's block, run as written (the session fixture did `cluster up`
    and does `cluster down`): the operator Running from our image, then
    examples/cluster-rollout.yaml applied with kubectl to Succeeded with reward 1."""
    steps = readme_steps()
    assert steps == [
        "hack/install-cluster-deps.sh",
        "swerollout cluster up --policy oracle",
        "export KUBECONFIG=$PWD/.swerollout/cluster/kubeconfig",
        "helm list -A && kubectl get pods -A",
        "kubectl apply -f examples/cluster-rollout.yaml",
        "kubectl get swer cluster-textkit -w",
        "swerollout cluster down",
    ], "the README's block changed: make this test follow it"
    # The fixture ran steps 1-2 in its workdir (`--workdir`: the checkout's .swerollout otherwise);
    # step 3's KUBECONFIG is that workdir's; the repository's files are read from the checkout.
    bins = find_binaries()
    assert bins.helm.parent == bins.kubectl.parent
    env = {
        **os.environ,
        "PATH": f"{bins.kubectl.parent}:{os.environ['PATH']}",
        "KUBECONFIG": f"{real_node.workdir}/.swerollout/cluster/kubeconfig",
    }
    assert Path(env["KUBECONFIG"]) == real_node.paths.kubeconfig

    def sh(command: str, timeout: float = 180) -> str:
        done = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        return done.stdout

    rows = [line.split() for line in sh(steps[3]).splitlines()]
    assert any(row[:2] == [RELEASE, RELEASE_NAMESPACE] and "deployed" in row for row in rows), rows
    operator = [row for row in rows if row[0] == RELEASE_NAMESPACE]
    assert [(row[2], row[3]) for row in operator] == [("1/1", "Running")], rows
    example = yaml.safe_load((ROOT / "examples" / "cluster-rollout.yaml").read_text())
    name = example["metadata"]["name"]
    assert steps[5] == f"kubectl get swer {name} -w"
    assert example["spec"]["instance"]["image"] in {i.image for i in Rollouts(real_node, "default").instances}
    sh(steps[4])
    try:
        # `-w` streams until interrupted; the same object, read until it is final.
        done = Rollouts(real_node, "default").wait_phase(name, TERMINAL)
        assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, json.dumps(done)[:3000]
        shown = sh(steps[5].removesuffix(" -w"))
        assert name in shown and "Succeeded" in shown, shown
    finally:
        real_node.kubectl("delete", "-f", str(ROOT / "examples" / "cluster-rollout.yaml"), "--wait=false")


def test_every_bundled_task_oracle_gets_1_and_null_gets_0(
    rollouts: Rollouts, oracle_url: str, null_policy: str
) -> None:
    tasks = range(len(rollouts.instances))
    for task in tasks:
        rollouts.create(f"oracle-{task}", oracle_url, task=task)
        rollouts.create(f"null-{task}", null_policy, task=task)
    for task in tasks:
        oracle = rollouts.wait_phase(f"oracle-{task}", TERMINAL, timeout=900)
        assert oracle["phase"] == "Succeeded" and oracle["reward"]["value"] == 1.0, json.dumps(oracle)[:3000]
        assert oracle["reward"]["resolved"] is True
        null = rollouts.wait_phase(f"null-{task}", TERMINAL, timeout=900)
        assert null["phase"] == "Succeeded" and null["reward"]["value"] == 0.0, json.dumps(null)[:3000]


def test_runner_logs_and_the_sandbox_cannot_read_the_runner_token(rollouts: Rollouts, slow_policy: str) -> None:
    rollouts.create("secrets", slow_policy, agent=SLOW_AGENT, inference=SLOW_INFERENCE)
    _generating(rollouts, "secrets")
    pod = rollouts.status("secrets")["sandbox"]["podName"]
    node, ns = rollouts.node, rollouts.namespace
    logs = node.kubectl("logs", pod, "-c", "runner", "-n", ns)
    assert logs.returncode == 0 and logs.stdout.strip(), logs.stderr
    runner = node.kubectl_ok("exec", pod, "-c", "runner", "-n", ns, "--", "ls", "/var/run/secrets/swerollout")
    assert "ingest-token" in runner.split()
    # The sandbox's own mount holds only the swerex token; the runner's files are in
    # another mount namespace and its processes in another PID namespace.
    sandbox = node.kubectl(
        "exec",
        pod,
        "-c",
        "sandbox",
        "-n",
        ns,
        "--",
        "sh",
        "-c",
        "ls /var/run/secrets/swerollout; cat /var/run/secrets/swerollout/ingest-token; "
        "grep -l 'agent_[r]unner' /proc/[0-9]*/cmdline",
    )  # [r]: the grep must not find itself
    assert sandbox.stdout.split() == ["swerex-token"], sandbox.stdout
    assert "No such file" in sandbox.stderr
    rollouts.set_suspend("secrets", True)


def test_suspend_then_resume_on_the_same_pod(rollouts: Rollouts, slow_policy: str) -> None:
    rollouts.create("susp", slow_policy, agent=SLOW_AGENT, inference=SLOW_INFERENCE)
    _generating(rollouts, "susp")
    pod_before = rollouts.status("susp")["sandbox"]["podUID"]
    rollouts.set_suspend("susp", True)
    aborted = rollouts.wait_phase("susp", {"Aborted"}, timeout=120)
    assert aborted["partial"]["reason"] == "Suspended"
    rollouts.set_suspend("susp", False)
    done = rollouts.wait_phase("susp", TERMINAL, timeout=420)
    assert done["phase"] == "Succeeded", json.dumps(done)[:3000]
    assert done["sandbox"]["podUID"] == pod_before, "resume must continue on the same live pod"
    assert done["attempts"] == 1


def test_pod_deleted_while_aborted_is_replayed_into_a_fresh_pod(rollouts: Rollouts, slow_policy: str) -> None:
    rollouts.create("lost", slow_policy, agent=SLOW_AGENT, inference=SLOW_INFERENCE)
    _generating(rollouts, "lost")
    rollouts.set_suspend("lost", True)
    aborted = rollouts.wait_phase("lost", {"Aborted"}, timeout=120)
    pod = aborted["sandbox"]["podName"]
    rollouts.node.kubectl_ok("delete", "pod", pod, "-n", rollouts.namespace, "--wait=true", timeout=180)
    rollouts.node.wait_for(
        "reclaimedAt", lambda: (rollouts.status("lost").get("sandbox") or {}).get("reclaimedAt"), timeout=120
    )
    rollouts.set_suspend("lost", False)
    done = rollouts.wait_phase("lost", TERMINAL, timeout=420)
    assert done["phase"] == "Succeeded", json.dumps(done)[:3000]
    assert done["attempts"] == 2 and done["replay"] is True
    assert done["sandbox"]["podName"] != pod


def test_operator_pod_deleted_mid_batch_is_recreated_and_each_rollout_finishes_once(
    rollouts: Rollouts, null_policy: str
) -> None:
    node, ns = rollouts.node, rollouts.namespace
    names = [f"batch-{i:02d}" for i in range(8)]
    seen: set[str] = set()
    stop = threading.Event()

    def record_pods() -> None:
        while not stop.is_set():
            proc = node.kubectl("get", "pods", "-n", ns, "-l", f"{api.LABEL_BATCH}=realnode", "-o", "name")
            seen.update(line.split("/", 1)[1] for line in proc.stdout.split() if "/" in line)
            time.sleep(0.5)

    recorder = threading.Thread(target=record_pods, daemon=True)
    recorder.start()
    try:
        for i, name in enumerate(names):
            rollouts.create(name, null_policy, task=i % len(rollouts.instances))
        before = node.get("pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/instance=" + RELEASE)["items"]
        operator_pods = [p["metadata"]["name"] for p in before if p["status"]["phase"] == "Running"]
        assert len(operator_pods) == 1, before
        node.wait_for(
            "a rollout pod running",
            lambda: any((rollouts.status(n).get("sandbox") or {}).get("podName") for n in names),
            timeout=300,
        )
        node.kubectl_ok("delete", "pod", operator_pods[0], "-n", RELEASE_NAMESPACE, "--wait=false")
        node.wait_for(
            "the Deployment's new operator pod Ready",
            lambda: [
                p
                for p in node.get("pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/instance=" + RELEASE)[
                    "items"
                ]
                if p["metadata"]["name"] != operator_pods[0]
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            ],
            timeout=300,
        )
        finals = {name: rollouts.wait_phase(name, TERMINAL, timeout=900) for name in names}
    finally:
        stop.set()
        recorder.join(timeout=10)
    for name, status in finals.items():
        assert status["phase"] == "Succeeded", (name, json.dumps(status)[:2000])
        assert status["attempts"] == 1, name
    # Deterministic names: one rollout pod per rollout (plus its eval pod), never a second attempt.
    rollout_pods = {p for p in seen if p.startswith("batch-") and "-eval" not in p}
    assert rollout_pods <= {f"{n}-a1" for n in names}, rollout_pods
