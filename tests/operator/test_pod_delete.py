"""A pod the operator deletes is known to be going at once, before the watch says so.

Passes over a rollout come from many events (its eval pod's own queue several), and a
pass that ran before the watch's echo of the deletion deleted the pod a second time. On
a real API server, with no watch running: the cache holds the pod as the DELETE left it.
"""

from __future__ import annotations

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.kube import PODS, AsyncKubeClient, NotFound
from swerollout_operator.cache import PodCache
from swerollout_operator.metrics import OperatorMetrics
from swerollout_operator.objects import Objects
from swerollout_operator.settings import OperatorSettings
from swerollout_operator.tokens import TokenKey

OWNER = "0f0e0d0c-0000-4000-8000-000000000001"


def _pod(name: str, node: str | None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "runner", "image": "registry.example/runner:1"}]}
    if node:
        spec["nodeName"] = node  # bound: a graceful delete leaves it terminating, as on a kubelet's node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {api.LABEL_ROLLOUT: "owner"},
            "ownerReferences": [
                {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": "owner", "uid": OWNER, "controller": True}
            ],
        },
        "spec": spec,
    }


async def test_a_deleted_pod_is_going_in_the_cache_before_any_watch_event(
    akube: AsyncKubeClient, namespace: str
) -> None:
    pods = PodCache()
    objects = Objects(akube, pods, OperatorSettings(), TokenKey.random(), OperatorMetrics())
    bound = await akube.create(PODS, _pod("terminating", node="somewhere"), namespace)
    unbound = await akube.create(PODS, _pod("unbound", node=None), namespace)
    pods.update(bound)
    pods.update(unbound)
    assert len(pods.owned_by(OWNER)) == 2

    await objects.delete_pod(namespace, "terminating")
    await objects.delete_pod(namespace, "unbound")

    # The bound pod terminates (no kubelet here finishes it): the cache says it is going,
    # so delete_pods, which skips pods already going, makes no second DELETE.
    cached = pods.get(namespace, "terminating")
    assert cached is not None and cached["metadata"].get("deletionTimestamp")
    live = await akube.get(PODS, "terminating", namespace)
    assert live["metadata"]["deletionTimestamp"] == cached["metadata"]["deletionTimestamp"]
    # An unbound pod is deleted at once (no kubelet to wait for): the cache holds it as
    # going until the watch's DELETED drops it, and delete_pods skips it too.
    with pytest.raises(NotFound):
        await akube.get(PODS, "unbound", namespace)
    assert all(p["metadata"].get("deletionTimestamp") for p in pods.owned_by(OWNER))
