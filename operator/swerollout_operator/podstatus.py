"""Reading a pod's status: is it ready, and if it cannot start, why not.

A pod stuck pulling an image looks "Pending" forever; users of other systems
report exactly that silent hang. Here every waiting reason that will not fix
itself is turned into a failure that names the container, the image and the
reason. A pod that waits for capacity (no node fits it, Kueue has not admitted it)
says so too (`waits_for`), so the rollout reads Queued with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swerollout.api.v1alpha1 import QueueReason

KUEUE_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's pod webhook puts on the pods it manages."""

# Waiting reasons that do not resolve by waiting longer.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


@dataclass(frozen=True)
class PodState:
    ready: bool
    """All containers are ready."""
    failed: bool
    """The pod cannot become ready (terminal phase or a fatal waiting reason)."""
    reason: str
    message: str
    pod_ip: str | None
    node_name: str | None
    waits_for: QueueReason | None = None
    """The pod waits for capacity (a node, Kueue's admission): the rollout reads Queued."""


def _statuses(pod: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    images = {c["name"]: c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
    out = []
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        out.append((cs, images.get(cs.get("name", ""), {})))
    return out


def read_pod(pod: dict[str, Any]) -> PodState:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    ip = status.get("podIP")
    node = (pod.get("spec") or {}).get("nodeName")

    for cs, container in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            image = container.get("image") or cs.get("image") or "?"
            detail = waiting.get("message") or ""
            msg = f"container {cs.get('name')} (image {image}): {waiting['reason']}"
            return PodState(False, True, waiting["reason"], f"{msg}: {detail}" if detail else msg, ip, node)

    if phase in ("Failed", "Succeeded"):
        # A rollout pod never finishes on its own while the rollout needs it.
        terminated = [
            (cs.get("name"), (cs.get("state") or {}).get("terminated") or {})
            for cs, _ in _statuses(pod)
            if (cs.get("state") or {}).get("terminated")
        ]
        detail = "; ".join(
            f"container {name} exited {t.get('exitCode')} ({t.get('reason', '')})" for name, t in terminated
        )
        reason = status.get("reason") or ("PodFailed" if phase == "Failed" else "PodCompleted")
        message = status.get("message") or detail or f"pod phase {phase}"
        return PodState(False, True, reason, message, ip, node)

    # Rollout and eval pods never finish on their own: every container serves until
    # the pod is deleted, so one that has terminated means the pod is done for
    # (a runner that crashed would otherwise leave the rollout Running forever).
    spec_containers = {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}
    for cs in status.get("containerStatuses") or []:
        ended = (cs.get("state") or {}).get("terminated")
        if ended and cs.get("name") in spec_containers:
            code = ended.get("exitCode")
            message = (
                f"container {cs.get('name')} exited {code} ({ended.get('reason', '')}); "
                f"its output: `swerollout logs {(pod.get('metadata') or {}).get('name', 'POD')} -c {cs.get('name')}` "
                "in dev mode, `kubectl logs` in a cluster"
            )
            return PodState(False, True, "ContainerExited", message, ip, node)

    gates = [g.get("name", "") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
    if gates and not node:
        # Kueue gates a pod it manages until its workload (the pod, or its whole pod group)
        # is admitted by the LocalQueue's ClusterQueue; no scheduler looks at it before.
        by_kueue = KUEUE_GATE in gates
        message = f"held by scheduling gate {', '.join(gates)}" + (
            " until Kueue admits its workload (kubectl get workloads shows why it waits)" if by_kueue else ""
        )
        return PodState(False, False, "SchedulingGated", message, ip, node, QueueReason.AWAITING_ADMISSION)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready", {}).get("status") == "True"
    if not ready:
        scheduled = conditions.get("PodScheduled", {})
        if scheduled.get("status") == "False":
            reason = scheduled.get("reason") or "Unschedulable"
            # The scheduler retries an unschedulable pod as the cluster changes: a wait for
            # capacity, not a failure (its message names what no node has).
            waits = {"Unschedulable": QueueReason.UNSCHEDULABLE, "SchedulingGated": QueueReason.AWAITING_ADMISSION}
            return PodState(False, False, reason, scheduled.get("message", ""), ip, node, waits.get(reason))
    return PodState(ready, False, "PodReady" if ready else "ContainersNotReady", "", ip, node)
