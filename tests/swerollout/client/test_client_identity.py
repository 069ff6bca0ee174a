"""The client as a trainer pod runs it: the in-cluster ServiceAccount identity with
namespaced RBAC (no cluster-wide rights, not even reading its Namespace)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from swerollout.client import AsyncRolloutClient, ClientConfigError, KubeApiError, RolloutClient
from swerollout.kube import ROLEBINDINGS, ROLES, AsyncKubeClient
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, instance

TRAINER_VERBS = ["get", "list", "watch", "create", "patch"]
BATCH_VERBS = ["get", "create", "patch"]
"""What abort(batch)/resume(batch) need on swerolloutbatches (docs/client.md, Permissions)."""


def pod_identity(
    plane: ControlPlane, namespace: str, token: str, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """What Kubernetes mounts into a pod, plus the service environment variables."""
    directory.mkdir()
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(plane.pki.ca_cert.read_bytes())
    (directory / "namespace").write_text(namespace)
    server = urlsplit(plane.server_url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", server.hostname or "")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    return directory


async def bind(
    kube: AsyncKubeClient, namespace: str, account: str, verbs: list[str], batch_verbs: list[str] | None = None
) -> None:
    rules = [{"apiGroups": ["swerollout.io"], "resources": ["swerollouts"], "verbs": verbs}]
    if batch_verbs:
        rules.append({"apiGroups": ["swerollout.io"], "resources": ["swerolloutbatches"], "verbs": batch_verbs})
    await kube.create(
        ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account},
            "rules": rules,
        },
        namespace,
    )
    await kube.create(
        ROLEBINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
        namespace,
    )


async def test_a_trainer_pod_submits_and_aborts_with_its_serviceaccount(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await asyncio.to_thread(crd.mint_token, namespace, "trainer")
    await bind(akube, namespace, "trainer", TRAINER_VERBS, BATCH_VERBS)
    directory = pod_identity(crd, namespace, token, tmp_path / "sa", monkeypatch)
    async with AsyncRolloutClient.in_cluster(directory) as client:
        assert client.namespace == namespace  # from the mounted namespace file
        names = await client.submit_batch([instance(0)], 2, batch="pod", inference=INFERENCE)
        assert await client.abort("pod") == names
        assert await client.resume("pod", weight_version="3") == names
        assert [r.status.value for r in await client.results("pod")] == ["aborted", "aborted"]


async def test_a_trainer_without_batch_rights_is_told_which_to_grant(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await asyncio.to_thread(crd.mint_token, namespace, "oldrole")
    await bind(akube, namespace, "oldrole", TRAINER_VERBS)
    directory = pod_identity(crd, namespace, token, tmp_path / "sa", monkeypatch)
    async with AsyncRolloutClient.in_cluster(directory) as client:
        names = await client.submit_batch([instance(0)], 1, batch="old", inference=INFERENCE)
        with pytest.raises(ClientConfigError, match="needs get, create and patch on swerolloutbatches") as info:
            await client.abort("old")
        assert "\n" not in str(info.value)
        # By name, each rollout's own spec.suspend: what such a role allows.
        assert await client.abort(names=names) == names


async def test_missing_rights_are_reported_with_the_forbidden_request(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await asyncio.to_thread(crd.mint_token, namespace, "reader")
    await bind(akube, namespace, "reader", ["get", "list", "watch"])
    directory = pod_identity(crd, namespace, token, tmp_path / "sa", monkeypatch)
    async with AsyncRolloutClient.in_cluster(directory) as client:
        with pytest.raises(KubeApiError, match="creating SWERollout pod-0-0: 403 Forbidden") as info:
            await client.submit_batch([instance(0)], 1, batch="pod", inference=INFERENCE)
        assert info.value.retryable is False


def test_outside_a_pod_in_cluster_says_what_to_use_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClientConfigError, match="connect"):
        RolloutClient.in_cluster(tmp_path)
