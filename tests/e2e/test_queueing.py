"""Waiting for capacity on the embedded default: a namespace's ResourceQuota (Kueue: test_kueue.py).

The dev stack runs no controller-manager, so nothing would count a quota's usage (the
API server's quota admission refuses every pod of a namespace whose quota is not
counted yet, and never gives back what a deleted pod held). The real
kube-controller-manager (built with the node binaries) runs here with only its
resourcequota controller, as a cluster's does it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.client.progress import BatchProgress
from swerollout.kube import PODS, SWEROLLOUTS, KubeClient, NotFound, ResourceType
from tests.support.controllermanager import controller_manager
from tests.support.devstack import DevStack, dump

RESOURCEQUOTAS = ResourceType("v1", "resourcequotas")
TERMINAL = {"Succeeded", "Failed"}


@pytest.fixture(scope="module")
def quota_counted(dev_stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with controller_manager(dev_stack.paths.kubeconfig, tmp_path_factory.mktemp("kcm"), "resourcequota") as kcm:
        assert kcm.poll() is None
        yield


def _set_quota(kube: KubeClient, pods: int) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "rollout-pods"},
        "spec": {"hard": {"pods": str(pods)}},
    }
    try:
        kube.patch(RESOURCEQUOTAS, "rollout-pods", {"spec": body["spec"]}, "default")
    except NotFound:
        kube.create(RESOURCEQUOTAS, body, "default")


def _quota_counted(kube: KubeClient, pods: int) -> bool:
    hard = ((kube.get(RESOURCEQUOTAS, "rollout-pods", "default").get("status") or {}).get("hard")) or {}
    return hard.get("pods") == str(pods)


def _batch(kube: KubeClient, batch: str) -> list[dict[str, Any]]:
    return list(kube.list(SWEROLLOUTS, "default", label_selector=f"{api.LABEL_BATCH}={batch}").get("items") or [])


def test_a_quota_bound_batch_reads_queued_then_finishes(dev_stack: DevStack, quota_counted: None) -> None:
    kube = dev_stack.kube
    _set_quota(kube, 0)
    dev_stack.wait("the quota counted", lambda: _quota_counted(kube, 0), timeout=60)
    names = [f"quota-0-{m}" for m in range(4)]
    try:
        for name in names:
            # A startup deadline shorter than the wait below: the wait must not count. Not
            # much shorter: once admitted, each pod must start within it, and 20 s was missed
            # on this 2-core machine at a load of 30.
            dev_stack.rollout(name, endpoint=dev_stack.oracle_url, batch="quota", sandbox={"startupTimeoutSeconds": 45})

        def all_queued() -> BatchProgress | None:
            progress = BatchProgress.from_objects("quota", _batch(kube, "quota"))
            return progress if progress.queued == len(names) else None

        progress = dev_stack.wait("every rollout Queued", all_queued, timeout=120)
        assert progress.queued_by_reason == {"QuotaExceeded": 4}
        for obj in _batch(kube, "quota"):
            status = obj["status"]
            assert status["queue"]["reason"] == "QuotaExceeded" and status["queue"]["queuedAt"]
            assert "exceeded quota" in status["message"] and "rollout-pods" in status["message"], status["message"]
            ready = {c["type"]: c for c in status["conditions"]}["SandboxReady"]
            assert ready["status"] == "False" and ready["reason"] == "QuotaExceeded"
            assert not status.get("sandbox"), "no pod was made"
        time.sleep(50)  # past startupTimeoutSeconds (45 s), all of it Queued
        assert {o["status"]["phase"] for o in _batch(kube, "quota")} == {"Queued"}, "the wait does not time out"

        # Room for two pods at a time (rollout and eval pods alike): the batch goes through in turns.
        _set_quota(kube, 2)
        seen_running_while_queued = False
        deadline = time.monotonic() + 600
        while True:
            objects = _batch(kube, "quota")
            phases = [o.get("status", {}).get("phase") for o in objects]
            live = kube.list(PODS, "default", label_selector=f"{api.LABEL_BATCH}=quota").get("items") or []
            assert len([p for p in live if not p["metadata"].get("deletionTimestamp")]) <= 2, dump(live)
            if "Queued" in phases and {"Starting", "Running", "Evaluating"} & set(phases):
                seen_running_while_queued = True
            if set(phases) <= TERMINAL:
                break
            assert time.monotonic() < deadline, f"the batch did not finish: {phases}"
            time.sleep(0.5)
        assert seen_running_while_queued, "two went first while the others waited"
        for obj in objects:
            status = obj["status"]
            assert status["phase"] == "Succeeded", dump(status)
            assert status["reward"]["value"] == 1.0
            queue = status["queue"]
            assert queue.get("reason") is None and queue.get("queuedAt") is None
            assert queue["waitedSeconds"] >= 50, "the whole wait was recorded"
    finally:
        for name in names:
            try:
                kube.delete(SWEROLLOUTS, name, "default")
            except NotFound:
                pass
        kube.delete(RESOURCEQUOTAS, "rollout-pods", "default")
