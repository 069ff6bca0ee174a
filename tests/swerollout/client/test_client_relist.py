"""An expired resourceVersion (410 Gone from the real API server) makes the client re-list, not fail."""

from __future__ import annotations

import asyncio
from typing import Any

from swerollout.client import AsyncRolloutClient, BatchProgress
from swerollout.kube import AsyncKubeClient, ResourceType, load_kubeconfig
from swerollout.store import ResultStore
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory


class ExpiredFirstList(AsyncKubeClient):
    """Reports resourceVersion 1 (long compacted away) on its first list, as if the
    list had been answered from a cache that then expired before the watch started."""

    lists = 0

    async def list(self, rt: ResourceType, namespace: str | None = None, **kwargs: Any) -> dict[str, Any]:
        page = await super().list(rt, namespace, **kwargs)
        type(self).lists += 1
        if type(self).lists == 1:
            page["metadata"]["resourceVersion"] = "1"
        return page


async def test_wait_relists_after_410_gone(
    crd: ControlPlane, akube: AsyncKubeClient, store: ResultStore, store_url: str, namespace: str
) -> None:
    async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as submitter:
        await submitter.submit_batch([instance(0)], 2, batch="gone", inference=INFERENCE)
    kube = ExpiredFirstList(load_kubeconfig(crd.kubeconfig_path))
    async with AsyncRolloutClient(kube, namespace, store_url=store_url, owns_kube=True) as client:
        phases: list[dict[str, int]] = []
        listed = asyncio.Event()

        def progress(state: BatchProgress) -> None:
            phases.append(state.phases)
            listed.set()

        waiter = asyncio.create_task(client.wait("gone", progress=progress, timeout=60))
        await listed.wait()  # the first list (with the expired version) is done; the watch will get 410
        await finish(akube, store, namespace, "gone-0-0", trajectory=make_trajectory(1))
        await finish(akube, store, namespace, "gone-0-1", trajectory=make_trajectory(2))
        final = await waiter
    assert final.done and final.phases == {"Succeeded": 2}
    assert ExpiredFirstList.lists >= 2  # the 410 led to a fresh list
    assert phases[0] == {"Pending": 2}
