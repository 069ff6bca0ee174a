"""Kueue on the embedded default: its own controller (sigs.k8s.io/kueue v0.17.0, built from
its Go module by `hack/k8s-bin/build.sh kueue`; tests/support/kueue.py) and its webhooks on
the dev stack's control plane, rollout pods in its plain-Pod integration.

The node agent is the kubelet and scheduler here: it binds no gated pod, and a pod it stops
reads Failed or Succeeded before its object goes, which is what lets Kueue drop its
finalizer and finish a workload. Kueue needs root (it runs in a private mount namespace,
see tests/support/kueue.py), so `make test` runs this module in its root-only part, beside
tests/cluster (hack/run-tests.sh).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from swerollout.api import v1alpha1 as api
from swerollout.kube import EVENTS, NAMESPACES, PODS, SECRETS, SWEROLLOUTS, KubeClient, NotFound, ResourceType
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import SubprocessServer, launch
from swerollout_operator.podspec import KUEUE_GROUP_LABEL, KUEUE_QUEUE_LABEL, rollout_label
from swerollout_operator.podstatus import KUEUE_GATE
from tests.support.checkpoints import restored_snapshot
from tests.support.controllermanager import controller_manager
from tests.support.devstack import DevStack, dump
from tests.support.kueue import LABEL as KUEUE_TEST_LABEL
from tests.support.kueue import running_kueue

TERMINAL = {"Succeeded", "Failed"}
KUEUE_NS = "kueue-rollouts"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUES = ResourceType(KUEUE_API, "clusterqueues", namespaced=False)
RESOURCE_FLAVORS = ResourceType(KUEUE_API, "resourceflavors", namespaced=False)
PRIORITY_CLASSES = ResourceType(KUEUE_API, "workloadpriorityclasses", namespaced=False)
LOCAL_QUEUES = ResourceType(KUEUE_API, "localqueues")
WORKLOADS = ResourceType(KUEUE_API, "workloads")
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Slow enough that a fault lands while a rollout generates; LEDGER short bash turns come first.
SLOW = {"delay_per_token": 0.03}
LEDGER = 3


@dataclass
class KueueQueues:
    group: str
    """LocalQueue of a ClusterQueue with room for 3 pods: more than one GRPO group of 2, less than two."""
    solo: str
    """LocalQueue of a ClusterQueue with room for 1 pod that preempts lower priorities for higher ones."""
    urgent: str
    """A WorkloadPriorityClass above the rollouts' (which have none: priority 0)."""


def _cluster_queue(name: str, pods: int, **spec: Any) -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": "100"}, {"name": "memory", "nominalQuota": "1000Gi"}]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "pods"],
                    "flavors": [
                        {"name": "local", "resources": [*resources, {"name": "pods", "nominalQuota": str(pods)}]}
                    ],
                }
            ],
            **spec,
        },
    }


@pytest.fixture(scope="module")
def kueue_queues(dev_stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KueueQueues]:
    """Kueue's own controller and webhooks on the dev stack's control plane, two queues and a priority."""
    from swerollout_dev.binaries import find_binaries

    kube = dev_stack.kube
    kube.create(NAMESPACES, {"metadata": {"name": KUEUE_NS, "labels": {KUEUE_TEST_LABEL: "true"}}})
    # The rollouts' spec.inference.adminKeySecretRef names a Secret in their own namespace.
    ref = dev_stack.state().admin_key_secret_ref()
    assert ref is not None
    admin = kube.get(SECRETS, ref["name"], "default")
    kube.create(SECRETS, {"metadata": {"name": ref["name"]}, "data": admin["data"]}, KUEUE_NS)
    # Kueue leaves a workload whose pod is gone to the garbage collector (its owner reference):
    # until it is collected it stays admitted and holds its quota.
    with (
        controller_manager(dev_stack.paths.kubeconfig, tmp_path_factory.mktemp("kcm"), "garbagecollector") as kcm,
        running_kueue(tmp_path_factory.mktemp("kueue"), dev_stack.paths.kubeconfig, find_binaries().kubectl) as kueue,
    ):
        kube.create(
            RESOURCE_FLAVORS, {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "local"}}
        )
        kube.create(CLUSTER_QUEUES, _cluster_queue("rollouts", 3))
        kube.create(CLUSTER_QUEUES, _cluster_queue("solo", 1, preemption={"withinClusterQueue": "LowerPriority"}))
        kube.create(
            PRIORITY_CLASSES,
            {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"}, "value": 1000},
        )
        for queue, cluster_queue in (("team-rl", "rollouts"), ("solo", "solo")):
            kube.create(
                LOCAL_QUEUES,
                {
                    "apiVersion": KUEUE_API,
                    "kind": "LocalQueue",
                    "metadata": {"name": queue},
                    "spec": {"clusterQueue": cluster_queue},
                },
                KUEUE_NS,
            )
        yield KueueQueues(group="team-rl", solo="solo", urgent="urgent")
        assert kueue.process.poll() is None, f"kueue died:\n{kueue.log_tail()}"
        assert kcm.poll() is None, "kube-controller-manager died"


@pytest.fixture(scope="module")
def slow_policy(dev_stack: DevStack) -> Iterator[SubprocessServer]:
    """The oracle with LEDGER bash turns first and a delay per token: a rollout is checkpointed
    and still generating for long enough to be aborted or preempted."""
    server = launch(
        "oracle",
        subprocess=True,
        tokenizer="qwen-2.5",
        tasks=dev_stack.workdir / "tasks" / "instances.jsonl",
        faults=SLOW,
        oracle_ledger=LEDGER,
        admin_api_key=dev_stack.paths.inference_admin_key.read_text().strip(),
        log_file=dev_stack.paths.logs / "kueue-slow-policy.log",
        ready_timeout=900,
    )
    assert isinstance(server, SubprocessServer)
    try:
        yield server
    finally:
        server.stop()


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == KUEUE_GATE for g in pod["spec"].get("schedulingGates") or [])


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}.get(type_) or {}


def _pods(kube: KubeClient, component: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list(PODS, KUEUE_NS).get("items") or []
        if (p["metadata"].get("labels") or {}).get(api.LABEL_COMPONENT) == component
    ]


def _workloads(kube: KubeClient) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in kube.list(WORKLOADS, KUEUE_NS).get("items") or []}


def _owned_by(workload: dict[str, Any]) -> set[str]:
    return {o["name"] for o in workload["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"}


def test_kueue_admits_a_grpo_group_whole_or_not_at_all(
    dev_stack: DevStack, kueue_queues: KueueQueues, slow_policy: SubprocessServer
) -> None:
    """Two GRPO groups of 2 under a ClusterQueue of 3 pods: a group's pods are let through
    together or not at all, the other group waits Queued/AwaitingAdmission, a member aborted
    while its group runs keeps its pod and its group's admission until it is resumed, eval
    pods are workloads of their own, and every rollout finishes with its reward. Then no pod
    is left: each group's workload finished, so Kueue let go of its pods."""
    kube = dev_stack.kube
    names = [f"kq-{s}-{m}" for s in range(2) for m in range(2)]
    for name in names:
        _, sample, member = name.rsplit("-", 2)
        group = {api.LABEL_SAMPLE: sample, api.LABEL_MEMBER: member, api.LABEL_GROUP_SIZE: "2"}
        dev_stack.rollout(
            name,
            endpoint=slow_policy.url,
            task=int(sample) % len(dev_stack.instances),
            namespace=KUEUE_NS,
            batch="kq",
            labels=group,
            sandbox={"queueName": kueue_queues.group},
        )
    seen_queued: set[str] = set()
    one_group_waited = False
    aborted: str | None = None
    held_while_aborted = False
    eval_pods: dict[str, dict[str, Any]] = {}
    seen_workloads: dict[str, dict[str, Any]] = {}  # the last state of each, before it is collected
    mixed_since: dict[str, float] = {}  # group -> since when its members' gates differ
    deadline = time.monotonic() + 1200
    while True:
        rollouts = {
            o["metadata"]["name"]: o.get("status") or {} for o in kube.list(SWEROLLOUTS, KUEUE_NS).get("items") or []
        }
        pods = [p for p in _pods(kube, "rollout") if not p["metadata"].get("deletionTimestamp")]
        groups: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            groups.setdefault(pod["metadata"]["labels"][KUEUE_GROUP_LABEL], []).append(pod)
        for group_name, members in groups.items():
            # Whole or not at all: never one member let through while the other waits. Kueue
            # admits the group's workload for every member, then lifts the pods' gates one at a
            # time, so a list between two of its writes may see them differ: only briefly, and
            # only with the workload admitted for the whole group.
            if len({_gated(p) for p in members}) > 1:
                workload = _workloads(kube).get(group_name) or {}
                assert _condition(workload, "Admitted").get("status") == "True", f"{group_name}: {dump(workload)}"
                assert sum(ps["count"] for ps in workload["spec"]["podSets"]) == 2, dump(workload)
                since = mixed_since.setdefault(group_name, time.monotonic())
                assert time.monotonic() - since < 60, f"group {group_name} half admitted: {dump(members)}"
            else:
                mixed_since.pop(group_name, None)
        admitted = {g for g, members in groups.items() if not _gated(members[0])}
        waiting = {g for g, members in groups.items() if _gated(members[0])}
        if admitted and waiting:
            one_group_waited = True
        for name, status in rollouts.items():
            if status.get("phase") == "Queued":
                assert (status.get("queue") or {}).get("reason") == "AwaitingAdmission", dump(status)
                assert "Kueue" in status["message"], status["message"]
                seen_queued.add(name)
        for pod in _pods(kube, "eval"):
            eval_pods.setdefault(pod["metadata"]["name"], pod)
        seen_workloads.update(_workloads(kube))
        if aborted is None and waiting:
            # A member of the running group, generating: abort it while the other group waits.
            running = [
                n
                for n, s in rollouts.items()
                if s.get("phase") == "Running" and (s.get("progress") or {}).get("turns", 0) >= 1
            ]
            if running:
                aborted = running[0]
                dev_stack.set_suspend(aborted, True, KUEUE_NS)
        if aborted is not None and not held_while_aborted and rollouts[aborted].get("phase") == "Aborted":
            pod_name = rollouts[aborted]["sandbox"]["podName"]
            [pod] = [p for p in pods if p["metadata"]["name"] == pod_name]
            workload = _workloads(kube).get(pod["metadata"]["labels"][KUEUE_GROUP_LABEL]) or {}
            assert pod["status"].get("phase") == "Running" and not _gated(pod), dump(pod)
            assert _condition(workload, "Admitted").get("status") == "True", dump(workload)
            held_while_aborted = True
            dev_stack.set_suspend(aborted, False, KUEUE_NS)
        phases = {s.get("phase") for s in rollouts.values()}
        if len(rollouts) == len(names) and phases <= TERMINAL:
            break
        assert time.monotonic() < deadline, f"not finished: {dump(rollouts)}"
        time.sleep(0.5)
    assert one_group_waited, "the ClusterQueue (3 pods) holds one group of 2 at a time"
    assert seen_queued >= {n for n in names if n.startswith("kq-1-")} or seen_queued >= {
        n for n in names if n.startswith("kq-0-")
    }, f"the waiting group read Queued: {seen_queued}"
    assert held_while_aborted, f"{aborted} was aborted while its group ran, its pod held"
    for name, status in rollouts.items():
        assert status["phase"] == "Succeeded" and status["reward"]["value"] == 1.0, f"{name}: {dump(status)}"
        assert status["attempts"] == 1, f"{name}: {dump(status)}"
    for sample in ("0", "1"):
        group_workload = seen_workloads[rollout_label(f"kq-{sample}")]
        assert sum(ps["count"] for ps in group_workload["spec"]["podSets"]) == 2, dump(group_workload)
    # Each eval pod: in the queue, alone, admitted as a workload of one pod.
    assert len(eval_pods) == len(names), sorted(eval_pods)
    for pod_name, pod in eval_pods.items():
        labels = pod["metadata"]["labels"]
        assert labels[KUEUE_QUEUE_LABEL] == kueue_queues.group and KUEUE_GROUP_LABEL not in labels, dump(pod)
        [workload] = [w for w in seen_workloads.values() if pod_name in _owned_by(w)]
        assert sum(ps["count"] for ps in workload["spec"]["podSets"]) == 1, dump(workload)
    # Kueue's finalizer held no ended pod: each group's workload finished (not a serving
    # group, which never does), Kueue let its pods go, and the collector took the workloads.
    dev_stack.wait("every pod gone", lambda: not kube.list(PODS, KUEUE_NS).get("items"), timeout=120)
    finished = {
        e["message"] for e in kube.list(EVENTS, KUEUE_NS).get("items") or [] if e.get("reason") == "FinishedWorkload"
    }
    for sample in ("0", "1"):
        assert f"Workload '{KUEUE_NS}/{rollout_label(f'kq-{sample}')}' is declared finished" in finished, finished
    dev_stack.wait("every workload collected", lambda: not _workloads(kube), timeout=120)


def _admin_post(server: SubprocessServer, admin_key: str, path: str, body: dict[str, Any]) -> None:
    response = httpx.post(
        f"{server.url}{path}", json=body, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30
    )
    response.raise_for_status()


def test_a_rollout_preempted_by_kueue_resumes_from_its_checkpoint(
    dev_stack: DevStack, kueue_queues: KueueQueues, slow_policy: SubprocessServer
) -> None:
    """A higher-priority workload preempts a running rollout's pod under a ClusterQueue of
    one pod: Kueue evicts the rollout's workload and deletes its pod, the operator takes it
    as any lost pod, the replay pod waits gated (the rollout Resuming) until the urgent pod
    is done, and the rollout finishes from its last checkpoint with its reward."""
    kube = dev_stack.kube
    admin_key = dev_stack.paths.inference_admin_key.read_text().strip()
    name = "kp-0"
    dev_stack.rollout(
        name, endpoint=slow_policy.url, namespace=KUEUE_NS, batch="kp", sandbox={"queueName": kueue_queues.solo}
    )
    uid = (dev_stack.get(name, KUEUE_NS) or {})["metadata"]["uid"]

    def checkpointed_and_generating() -> bool:
        requests = httpx.get(f"{slow_policy.url}/_standin/requests", timeout=10).json()["requests"]
        own = [r["rid"] for r in requests if r["rid"].startswith(f"{uid}-t")]
        turns = (dev_stack.status(name, KUEUE_NS).get("checkpoint") or {}).get("turns", 0)
        loads = httpx.get(f"{slow_policy.url}/v1/loads", timeout=10).json()["loads"]
        return turns >= 2 and len(own) > turns and int(loads[0]["num_running_reqs"]) > 0

    dev_stack.wait("a checkpoint and a turn in flight", checkpointed_and_generating, timeout=600)
    # Frozen mid-turn, so the rollout cannot finish before the preemption lands.
    _admin_post(slow_policy, admin_key, "/pause_generation", {"mode": "in_place"})
    try:
        first = dev_stack.status(name, KUEUE_NS)["sandbox"]["podName"]
        template = kube.get(PODS, first, KUEUE_NS)
        runner = template["spec"]["containers"][0]
        urgent = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "urgent",
                "labels": {KUEUE_QUEUE_LABEL: kueue_queues.solo, PRIORITY_LABEL: kueue_queues.urgent},
            },
            "spec": {
                "restartPolicy": "Never",
                "tolerations": template["spec"].get("tolerations") or [],
                "nodeSelector": template["spec"].get("nodeSelector") or {},
                "containers": [
                    {
                        "name": "work",
                        "image": runner["image"],
                        "command": ["python", "-c", "import time; time.sleep(40)"],
                    }
                ],
            },
        }
        kube.create(PODS, urgent, KUEUE_NS)

        def preempted() -> str | None:
            # Kueue's own record on the pod (its workload may be collected soon after the pod goes).
            stopped = [
                e["message"]
                for e in kube.list(EVENTS, KUEUE_NS).get("items") or []
                if e["involvedObject"].get("name") == first and e.get("reason") == "Stopped"
            ]
            return next((m for m in stopped if m.startswith("Preempted to accommodate a workload")), None)

        message = dev_stack.wait("the rollout's pod preempted by Kueue", preempted, timeout=180)
        assert "prioritization in the ClusterQueue" in message, message

        # The replay pod is a workload of its own, behind the urgent one: the rollout stays
        # Resuming (only a first pod makes it Queued) while Kueue holds the pod's gate.
        def replay_gated() -> bool:
            try:
                replay = kube.get(PODS, f"{name}-a2", KUEUE_NS)
                urgent_phase = kube.get(PODS, "urgent", KUEUE_NS)["status"].get("phase")
            except NotFound:
                return False
            phase = dev_stack.status(name, KUEUE_NS).get("phase")
            return _gated(replay) and urgent_phase == "Running" and phase == "Resuming"

        dev_stack.wait("the replay pod waiting for Kueue behind the urgent pod", replay_gated, timeout=300)
    finally:
        _admin_post(slow_policy, admin_key, "/continue_generation", {})
    final = dev_stack.wait_phase(name, TERMINAL, timeout=900, namespace=KUEUE_NS)
    assert final["phase"] == "Succeeded" and final["reward"]["value"] == 1.0, dump(final)
    assert final["attempts"] == 2 and final["sandbox"]["podName"] == f"{name}-a2", dump(final)
    [retry] = final["retries"]
    assert retry["reason"] == "PodLost" and retry["attempt"] == 1 and retry["turns"] >= 2, dump(final)
    assert kube.get(PODS, "urgent", KUEUE_NS)["status"]["phase"] == "Succeeded"
    resumed = restored_snapshot(dev_stack.stored(final["partial"]["snapshot"]))
    trajectory = Trajectory.from_bytes(dev_stack.read_object(final["result"]["trajectory"]))
    prefix = resumed.buffer.input_ids
    assert [*trajectory.prompt_ids, *trajectory.response_ids][: len(prefix)] == prefix, "the checkpoint's tokens"
    assert any("replayed this rollout into a fresh pod" in n for n in trajectory.info.get("notes", []))
    kube.delete(PODS, "urgent", KUEUE_NS)
