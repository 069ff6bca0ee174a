"""The usual mistakes each give their own error that names the fix (client and CLI)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from swerollout.client import (
    AsyncRolloutClient,
    ClientConfigError,
    CrdNotInstalled,
    EndpointUnreachable,
    NamespaceNotFound,
    RolloutClient,
    UnknownBatch,
)
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, instance

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def plane_without_crd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A second, bare control plane: the session one has the CRD installed."""
    plane = ControlPlane(tmp_path_factory.mktemp("bare-plane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop(delete_data=True)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def health_server() -> AsyncIterator[str]:
    """A real HTTP server that answers /health like SGLang does."""
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def test_no_kubeconfig_anywhere_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ClientConfigError, match="KUBECONFIG"):
        AsyncRolloutClient.connect()
    with pytest.raises(ClientConfigError, match="cannot read kubeconfig"):
        RolloutClient.connect(tmp_path / "missing.kubeconfig")


@pytest.mark.cluster  # its own control plane, without the CRD
async def test_a_missing_crd_says_how_to_install_it(plane_without_crd: ControlPlane) -> None:
    async with AsyncRolloutClient.connect(plane_without_crd.kubeconfig_path, namespace="default") as client:
        with pytest.raises(CrdNotInstalled, match="crds/"):
            await client.submit_batch([instance(0)], 1, batch="b", inference=INFERENCE)
        with pytest.raises(CrdNotInstalled):
            await client.wait("b")


async def test_a_wrong_namespace_is_named(crd: ControlPlane) -> None:
    async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace="no-such-ns") as client:
        with pytest.raises(NamespaceNotFound, match="no-such-ns"):
            await client.submit_batch([instance(0)], 1, batch="b", inference=INFERENCE)
        with pytest.raises(NamespaceNotFound):
            await client.results("b")


async def test_an_unknown_batch_is_named_everywhere(client: AsyncRolloutClient) -> None:
    await client.submit_batch([instance(0)], 1, batch="known", inference=INFERENCE)
    for call in (client.wait, client.abort, client.resume, client.results):
        with pytest.raises(UnknownBatch, match="'knwon'"):
            await call("knwon")
    with pytest.raises(UnknownBatch):
        await anext(client.stream_results("knwon"))


async def test_endpoint_check_refuses_a_dead_server_and_accepts_a_live_one(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str, health_server: str
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EndpointUnreachable, match="unreachable"):
        await client.submit_batch(
            [instance(0)], 1, batch="ep", inference={**INFERENCE, "endpoint": dead}, check_endpoint=True
        )
    assert (await akube.list(SWEROLLOUTS, namespace))["items"] == []
    await client.submit_batch(
        [instance(0)], 1, batch="ep", inference={**INFERENCE, "endpoint": health_server}, check_endpoint=True
    )
    assert len((await akube.list(SWEROLLOUTS, namespace))["items"]) == 1


@pytest.mark.cluster  # its own control plane, without the CRD
def test_cli_exit_code_2_when_the_crd_is_missing(plane_without_crd: ControlPlane) -> None:
    env = {**os.environ, "KUBECONFIG": str(plane_without_crd.kubeconfig_path)}
    done = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", "list"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "install the CRD" in done.stderr
