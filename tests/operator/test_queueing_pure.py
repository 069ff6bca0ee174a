"""Waiting for capacity (phase Queued) and Kueue's pod metadata, as pure functions: the
phase machine's queue clock, the deadlines that leave the wait out or bound it, what a
pod's state says about it, the quota refusal's wording, the pod's Kueue labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase, QueueReason
from swerollout.client.progress import BatchProgress
from swerollout.kube import Forbidden
from swerollout_operator import phases, podspec
from swerollout_operator.cache import PodCache, RolloutCache
from swerollout_operator.deadlines import deadline_passed, queue_overdue, startup_overdue
from swerollout_operator.objects import is_quota_refusal
from swerollout_operator.phases import Trigger
from swerollout_operator.podstatus import KUEUE_GATE, read_pod
from swerollout_operator.settings import OperatorSettings

from .test_pure import rollout

QUOTA_403 = 'pods "r1-a1" is forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=2, limited: pods=2'


def _iso(at: datetime) -> str:
    return at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_queued_keeps_a_clock_that_only_the_wait_runs() -> None:
    entered = phases.apply(None, Trigger.QUEUED, reason="QuotaExceeded", message="refused", generation=1)
    assert entered.new == Phase.QUEUED and entered.status_patch["startTime"]
    queue = entered.status_patch["queue"]
    assert queue["reason"] == "QuotaExceeded" and queue["queuedAt"]
    ready = {c["type"]: c for c in entered.status_patch["conditions"]}["SandboxReady"]
    assert ready["status"] == "False" and ready["reason"] == "QuotaExceeded"

    # Another reason to wait: the same wait goes on (queuedAt kept: the patch leaves it).
    started = _iso(datetime.now(UTC) - timedelta(seconds=40))
    status = {**entered.status_patch, "queue": {"reason": "QuotaExceeded", "queuedAt": started, "waitedSeconds": 5}}
    again = phases.apply(
        api.SWERolloutStatus.model_validate(status),
        Trigger.QUEUED,
        reason="Unschedulable",
        message="no node",
        generation=1,
    )
    assert again.status_patch["queue"] == {"reason": "Unschedulable"}

    # Leaving Queued adds the wait to waitedSeconds and clears the current one.
    left = phases.apply(
        api.SWERolloutStatus.model_validate(status),
        Trigger.POD_CREATED,
        reason="PodCreated",
        message="created",
        generation=1,
    )
    assert left.new == Phase.STARTING
    assert left.status_patch["queue"]["reason"] is None and left.status_patch["queue"]["queuedAt"] is None
    assert 44 <= left.status_patch["queue"]["waitedSeconds"] <= 47
    # A transition that neither enters nor leaves Queued does not touch the clock.
    assert (
        "queue"
        not in phases.apply(
            api.SWERolloutStatus.model_validate({"phase": "Starting"}),
            Trigger.SANDBOX_READY,
            reason="SandboxReady",
            message="",
            generation=1,
        ).status_patch
    )


def test_queued_is_left_for_starting_running_or_failed_and_needs_a_queue_reason() -> None:
    queued = {"phase": "Queued"}
    assert phases.next_phase(Phase.STARTING, Trigger.QUEUED) == Phase.QUEUED
    assert phases.next_phase(Phase.QUEUED, Trigger.DEQUEUED) == Phase.STARTING
    assert phases.next_phase(Phase.QUEUED, Trigger.SANDBOX_READY) == Phase.RUNNING
    assert phases.next_phase(Phase.QUEUED, Trigger.STARTUP_FAILED) == Phase.FAILED
    assert not phases.allowed(Phase.RUNNING, Trigger.QUEUED), "a running rollout never waits for capacity"
    with pytest.raises(ValueError):
        phases.apply(
            api.SWERolloutStatus.model_validate(queued),
            Trigger.QUEUED,
            reason="NotAQueueReason",
            message="",
            generation=1,
        )


def _entry(status: dict[str, Any], created_ago: float, **sandbox: Any) -> Any:
    body = {
        "metadata": {
            "name": "r1",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": _iso(datetime.now(UTC) - timedelta(seconds=created_ago)),
        },
        "spec": rollout(sandbox={"startupTimeoutSeconds": 60, **sandbox}).spec.model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        "status": status,
    }
    return RolloutCache().observe(body)[0]


def test_the_startup_deadline_leaves_the_queued_time_out() -> None:
    # Created 100 s ago with a 60 s startup deadline, 50 s of which were spent Queued.
    waited = _entry({"phase": "Starting", "queue": {"waitedSeconds": 50}}, created_ago=100)
    assert not startup_overdue(waited) and not deadline_passed(waited, datetime.now(UTC).timestamp())
    assert startup_overdue(_entry({"phase": "Starting", "queue": {"waitedSeconds": 30}}, created_ago=100))
    # While Queued the startup deadline does not run at all, and by default nothing bounds the wait.
    queued = {"phase": "Queued", "queue": {"reason": "QuotaExceeded", "queuedAt": _iso(datetime.now(UTC))}}
    forever = _entry(queued, created_ago=100_000)
    assert not startup_overdue(forever) and not queue_overdue(forever)
    assert not deadline_passed(forever, datetime.now(UTC).timestamp() + 10**9)


def test_queue_timeout_bounds_every_wait_together() -> None:
    since = _iso(datetime.now(UTC) - timedelta(seconds=20))
    queued = {"phase": "Queued", "queue": {"reason": "Unschedulable", "queuedAt": since, "waitedSeconds": 15}}
    assert queue_overdue(_entry(queued, created_ago=1000, queueTimeoutSeconds=30)), "20 s now + 15 s before"
    assert not queue_overdue(_entry(queued, created_ago=1000, queueTimeoutSeconds=60))
    entry = _entry(queued, created_ago=1000, queueTimeoutSeconds=60)
    assert deadline_passed(entry, datetime.now(UTC).timestamp() + 30)
    assert not deadline_passed(entry, datetime.now(UTC).timestamp() + 20)
    with pytest.raises(ValueError, match="queue_timeout_seconds|queueTimeoutSeconds"):
        api.SandboxSpec.model_validate({"queueTimeoutSeconds": 5})


def _pod(spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "r1-a1", "namespace": "ns", "uid": "p1", "resourceVersion": "2"},
        "spec": {"containers": [{"name": "sandbox", "image": "img"}], **spec},
        "status": status,
    }


def test_a_pod_waiting_for_a_node_or_kueue_reads_as_queued_through_the_cache() -> None:
    gated = _pod(
        {"schedulingGates": [{"name": KUEUE_GATE}]},
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
    )
    unschedulable = _pod(
        {},
        {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes: cpu"}
            ],
        },
    )
    placed = _pod({"nodeName": "n1"}, {"phase": "Pending"})
    cache = PodCache()
    for pod, want in ((gated, QueueReason.AWAITING_ADMISSION), (unschedulable, QueueReason.UNSCHEDULABLE)):
        cache.update(pod)
        kept = cache.get("ns", "r1-a1")
        assert kept is not None
        state = read_pod(kept)
        assert state == read_pod(pod) and state.waits_for is want and not state.failed
    assert "Kueue" in read_pod(gated).message and "0/3 nodes: cpu" in read_pod(unschedulable).message
    assert read_pod(placed).waits_for is None


def test_only_a_quota_refusal_is_a_wait() -> None:
    assert is_quota_refusal(Forbidden(QUOTA_403, status=403, reason="Forbidden"))
    unknown = 'pods "r1-a1" is forbidden: status unknown for quota: two-pods, resource: pods'
    assert is_quota_refusal(Forbidden(unknown, status=403, reason="Forbidden"))
    rbac = 'pods is forbidden: User "system:serviceaccount:x:y" cannot create resource "pods"'
    assert not is_quota_refusal(Forbidden(rbac, status=403, reason="Forbidden"))


GROUP_META = {
    "name": "step-1-0-2",
    "namespace": "ns",
    "uid": "u1",
    "labels": {api.LABEL_BATCH: "step-1", api.LABEL_SAMPLE: "0", api.LABEL_MEMBER: "2", api.LABEL_GROUP_SIZE: "4"},
}


def test_kueue_labels_make_one_pod_group_per_grpo_group() -> None:
    queued = rollout(sandbox={"queueName": "team-a"})
    pod = podspec.rollout_pod(queued, GROUP_META, OperatorSettings(), attempt=1)
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[podspec.KUEUE_QUEUE_LABEL] == "team-a"
    assert labels[podspec.KUEUE_GROUP_LABEL] == "step-1-0"
    assert annotations[podspec.KUEUE_GROUP_COUNT] == "4" and annotations[podspec.KUEUE_GROUP_RETRIABLE] == "false"
    # Eval pods and replays are workloads of their own, in the same queue.
    for role, attempt in (("eval", 1), ("rollout", 2)):
        alone = podspec.rollout_pod(queued, GROUP_META, OperatorSettings(), attempt=attempt, role=role)["metadata"]
        assert alone["labels"][podspec.KUEUE_QUEUE_LABEL] == "team-a"
        assert podspec.KUEUE_GROUP_LABEL not in alone["labels"]
        assert podspec.KUEUE_GROUP_COUNT not in alone["annotations"]
    # A rollout made without the client's group labels is a pod of its own.
    bare = {**GROUP_META, "labels": {api.LABEL_BATCH: "step-1"}}
    assert (
        podspec.KUEUE_GROUP_LABEL
        not in podspec.rollout_pod(queued, bare, OperatorSettings(), attempt=1)["metadata"]["labels"]
    )


def test_the_default_queue_applies_only_where_the_spec_names_none() -> None:
    settings = OperatorSettings(default_queue_name="shared")
    plain = podspec.rollout_pod(rollout(), GROUP_META, settings, attempt=1)["metadata"]["labels"]
    own = podspec.rollout_pod(rollout(sandbox={"queueName": "mine"}), GROUP_META, settings, attempt=1)
    assert plain[podspec.KUEUE_QUEUE_LABEL] == "shared"
    assert own["metadata"]["labels"][podspec.KUEUE_QUEUE_LABEL] == "mine"
    no_kueue = podspec.rollout_pod(rollout(), GROUP_META, OperatorSettings(), attempt=1)["metadata"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in {**no_kueue["labels"], **no_kueue["annotations"]})
    with pytest.raises(ValueError, match="queue"):
        rollout(sandbox={"queueName": "Not A Queue"})


def test_batch_progress_counts_queued_members_by_reason() -> None:
    def member(name: str, phase: str, reason: str | None = None) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": phase}
        if reason:
            status["queue"] = {"reason": reason, "queuedAt": "2026-01-01T00:00:00Z"}
        return {"metadata": {"name": name, "labels": {api.LABEL_BATCH: "b"}}, "status": status}

    objects = [
        member("b-0-0", "Running"),
        member("b-0-1", "Queued", "QuotaExceeded"),
        member("b-1-0", "Queued", "QuotaExceeded"),
        member("b-1-1", "Queued", "AwaitingAdmission"),
    ]
    progress = BatchProgress.from_objects("b", objects)
    assert progress.queued == 3 and progress.phases["Queued"] == 3
    assert progress.queued_by_reason == {"QuotaExceeded": 2, "AwaitingAdmission": 1}
    assert [m.queue_reason for m in progress.members] == ["", "QuotaExceeded", "QuotaExceeded", "AwaitingAdmission"]


def test_swerollout_watch_shows_the_queued_counts_and_reasons() -> None:
    from rich.console import Console

    from swerollout.cli.watch import members_table, summary_table

    objects = [
        {"metadata": {"name": f"b-0-{m}"}, "status": {"phase": "Queued", "queue": {"reason": "QuotaExceeded"}}}
        for m in range(3)
    ] + [{"metadata": {"name": "b-0-3"}, "status": {"phase": "Running"}}]
    state = BatchProgress.from_objects("b", objects)
    console = Console(width=250, record=True)
    console.print(summary_table(state, 0.0))
    console.print(members_table(state))
    text = console.export_text()
    assert "queued for" in text and "3 QuotaExceeded" in text
    assert "Queued (QuotaExceeded)" in text
