"""The trainer-client fixtures (CRD in the session control plane, a file:// store per
test, a client on both) for test modules outside tests/swerollout/client: import them
into the module (``from tests.support.client_fixtures import client, crd, store, store_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from swerollout.client import AsyncRolloutClient
from swerollout.store import ResultStore, open_store
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.policy_server.engine import Engine
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from tests.support.cluster import install_crd


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> ControlPlane:
    install_crd(control_plane)
    return control_plane


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[ResultStore]:
    opened = open_store(store_url)
    yield opened
    await opened.aclose()


@pytest.fixture
async def client(crd: ControlPlane, namespace: str, store_url: str) -> AsyncIterator[AsyncRolloutClient]:
    async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace, store_url=store_url) as c:
        yield c


@pytest.fixture
def keyed_server() -> Iterator[PolicyServerHandle]:
    """A null-policy stand-in that requires the admin key ``k-admin`` on its admin routes."""
    with launch("null", tokenizer="qwen-2.5", admin_api_key="k-admin") as server:
        yield server


@pytest.fixture
def server_aborts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """abort_all calls that got past the stand-in's auth into its engine (it runs in the
    test's process; a CLI's requests may come from a subprocess). Counted at the engine,
    not from its log: a library imported earlier in the same test process may reconfigure
    logging, and then a log-counting test fails for a reason of its own."""
    seen: list[bool] = []
    real = Engine.abort

    def counting(self: Engine, rid: str, *, abort_all: bool, message: str = "Abort requested") -> int:
        if abort_all:
            seen.append(True)
        return real(self, rid, abort_all=abort_all, message=message)

    monkeypatch.setattr(Engine, "abort", counting)
    return seen
