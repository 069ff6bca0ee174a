"""abort/resume marks ride out transient API failures (connection reset, 5xx, 429)
without ever sending a mark twice: the real API server behind a proxy that fails
chosen requests (tests.support.kube_fault_proxy)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from swerollout.api.v1alpha1 import GROUP, PLURAL, VERSION
from swerollout.backoff import Backoff
from swerollout.client import AsyncRolloutClient, KubeApiError, suspend
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, instance, run
from tests.support.kube_fault_proxy import FaultProxy, fault_proxy


def patches(proxy: FaultProxy, namespace: str, names: list[str]) -> Counter[str]:
    """How many PATCHes of each rollout reached the API server."""
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/"
    return Counter({n: proxy.forwarded[("PATCH", base + n)] for n in names})


@asynccontextmanager
async def proxied(
    crd: ControlPlane, namespace: str, store_url: str, tmp_path: Path
) -> AsyncIterator[tuple[FaultProxy, AsyncRolloutClient]]:
    """A client that reaches the API server through a fault proxy."""
    with fault_proxy(crd.kubeconfig_path) as proxy:
        kubeconfig = proxy.write_kubeconfig(tmp_path / "proxy.kubeconfig", namespace)
        async with AsyncRolloutClient.connect(str(kubeconfig), namespace=namespace, store_url=store_url) as client:
            yield proxy, client


async def running_members(crd: ControlPlane, akube: AsyncKubeClient, namespace: str, store_url: str) -> list[str]:
    async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace, store_url=store_url) as direct:
        await direct.submit_batch([instance(0)], 4, batch="rt", inference=INFERENCE)
    names = [f"rt-0-{m}" for m in range(4)]
    for name in names:
        await run(akube, namespace, name)
    return names


async def test_abort_and_resume_retry_transient_failures_and_never_patch_twice(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, store_url: str, tmp_path: Path
) -> None:
    names = await running_members(crd, akube, namespace, store_url)
    async with proxied(crd, namespace, store_url, tmp_path) as (proxy, client):
        # One member's mark never reaches the server, one is applied and its answer lost,
        # one is applied and answered 503, one is throttled.
        proxy.fail("PATCH", "drop", "lose", 503, 429)
        assert await client.abort(names=names) == names, "a mark whose answer was lost is still reported"
        assert proxy.pending() == 0 and sorted(map(str, (f for _, _, f in proxy.faulted))) == [
            "429",
            "503",
            "drop",
            "lose",
        ]
        assert patches(proxy, namespace, names) == Counter(dict.fromkeys(names, 1)), "each mark reached the server once"
        suspended = {
            o["metadata"]["name"]: o["spec"]["suspend"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
        }
        assert suspended == dict.fromkeys(names, True)

        proxy.fail("PATCH", "lose", 503)
        assert await client.resume(names=names, weight_version="5") == names
        assert patches(proxy, namespace, names) == Counter(dict.fromkeys(names, 2))
        for item in (await akube.list(SWEROLLOUTS, namespace))["items"]:
            assert item["spec"]["suspend"] is False and item["spec"]["inference"]["weightVersion"] == "5"

        # A re-read that fails transiently is retried as well.
        proxy.fail("PATCH", "lose")
        proxy.fail("GET", 503, "drop", after="PATCH")
        assert await client.abort(names=names[:1]) == names[:1]
        assert proxy.pending() == 0
        assert (await akube.get(SWEROLLOUTS, names[0], namespace))["spec"]["suspend"] is True
        assert patches(proxy, namespace, names)[names[0]] == 3


async def test_a_mark_that_keeps_failing_names_the_rollout_and_is_retryable(
    crd: ControlPlane,
    akube: AsyncKubeClient,
    namespace: str,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = await running_members(crd, akube, namespace, store_url)
    monkeypatch.setattr(suspend, "MARK_BACKOFF", Backoff(first_seconds=0.05, attempts=3))
    async with proxied(crd, namespace, store_url, tmp_path) as (proxy, client):
        proxy.fail("PATCH", "drop", "drop", "drop")
        with pytest.raises(KubeApiError, match=f"spec.suspend=True on {names[0]}") as caught:
            await client.abort(names=names[:1])
        assert caught.value.retryable
        assert proxy.pending() == 0 and patches(proxy, namespace, names[:1])[names[0]] == 0
        assert not (await akube.get(SWEROLLOUTS, names[0], namespace))["spec"].get("suspend")


async def test_reads_by_name_and_batch_ride_out_transient_failures(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, store_url: str, tmp_path: Path
) -> None:
    names = await running_members(crd, akube, namespace, store_url)
    async with proxied(crd, namespace, store_url, tmp_path) as (proxy, client):
        await client.get_rollout(names[0])  # the cluster check is done once; the faults hit the reads
        proxy.fail("GET", 503, "drop")
        assert (await client.get_rollout(names[1]))["metadata"]["name"] == names[1]
        proxy.fail("GET", 503)
        assert [o["metadata"]["name"] for o in await client.list_rollouts("rt")] == names
        proxy.fail("GET", "drop")
        assert await client.abort(names=names[2:3]) == names[2:3]
        assert proxy.pending() == 0 and len(proxy.faulted) == 4
