"""Fixtures shared by every test that needs a real Kubernetes control plane.

``control_plane`` starts etcd + kube-apiserver once per test session (about a few
seconds) and stops them at the end, also when tests fail or the run is interrupted.
Tests that use it are marked ``cluster`` automatically (``-m "not cluster"`` skips
them). Use ``namespace`` for isolation: each test gets its own, emptied afterwards.

No kubelet/scheduler/controller-manager runs: nothing schedules pods, nothing
garbage-collects ownerReferences, namespaces never finish deleting.
"""

from __future__ import annotations

import re
import resource
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from swerollout.kube import NAMESPACES, AsyncKubeClient, KubeClient
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.controlplane.cleanup import purge_namespace
from tests.support.rbac import once_rbac_allows

CLUSTER_FIXTURES = {"control_plane", "kube", "akube", "kubectl", "helm", "namespace"}

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


_STARTED = time.monotonic()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: needs the real control plane (kube-apiserver + etcd on loopback)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line under the results: the CPU this run used beside its wall time, so each part
    of `make test` (hack/run-tests.sh) shows whether it computes or waits. "Reaped" is every
    process it started and waited for (operators, runners, CLI calls, control planes); a
    detached one, such as a dev stack's supervisor and what that starts, is not in it."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    terminalreporter.write_line(
        f"cpu: {own.ru_utime + own.ru_stime:.0f} s in pytest, {reaped.ru_utime + reaped.ru_stime:.0f} s in the "
        f"processes it reaped, {time.monotonic() - _STARTED:.0f} s wall"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver for the whole session; admin kubeconfig at ``.kubeconfig_path``."""
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop(delete_data=True)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """A sync admin client of the session control plane."""
    with control_plane.admin_client() as client:
        yield client


@pytest.fixture
async def akube(control_plane: ControlPlane) -> AsyncIterator[AsyncKubeClient]:
    """An asyncio admin client of the session control plane."""
    async with control_plane.admin_async_client() as client:
        yield client


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Runner:
    """``kubectl("get", "pods", "-n", ns)`` -> CompletedProcess (text; check returncode yourself).

    Keyword arguments: ``input=`` (stdin text), ``kubeconfig=`` (another identity).
    """
    return control_plane.kubectl


@pytest.fixture
def helm(control_plane: ControlPlane) -> Runner:
    """``helm("install", ...)`` -> CompletedProcess, with helm's state under the control plane's workdir."""
    return control_plane.helm


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-") or "test"
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test; its objects are deleted afterwards."""
    name = _namespace_name(request.node.name)
    with control_plane.admin_client() as kube:
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with control_plane.admin_client() as kube:
            purge_namespace(kube, name)


@pytest.fixture
def rbac_eventually() -> Callable[..., object]:
    """``rbac_eventually(lambda: ...)`` retries a call until RBAC stops refusing it."""
    return once_rbac_allows
