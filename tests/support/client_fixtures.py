"""The trainer-client fixtures (CRD in the session control plane, a file:// store per
test, a client on both) for test modules outside tests/swerollout/client: import them
into the module (``from tests.support.client_fixtures import client, crd, store, store_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from swerollout.client import AsyncRolloutClient
from swerollout.dev.controlplane import ControlPlane
from swerollout.store import ResultStore, open_store
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
