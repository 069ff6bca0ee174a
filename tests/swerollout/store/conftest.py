"""Fixtures for the result-store tests: both backends on real storage.

``moto`` is one real S3-compatible server (moto's standalone server, a separate
process on a free loopback port) for the whole session, with one bucket; each test
gets its own key prefix in it, so tests never see each other's objects. ``store``
is parametrized over ``file`` and ``s3`` so that every behavioural test runs
against both backends. ``raw`` reaches around the store to read/overwrite the
stored bytes (for tampering).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from swerollout.store import ResultStore, open_store
from tests.support.store_support import BUCKET, FileRaw, MotoServer, RawAccess, S3Raw, start_moto


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        client.close()
        yield server
    finally:
        server.stop()


@pytest.fixture
def moto_factory() -> Iterator[Any]:
    """Start extra moto servers a test may stop; all are stopped at teardown."""
    started: list[MotoServer] = []

    def start() -> MotoServer:
        server = start_moto()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(params=["file", "s3"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    if backend == "file":
        return (tmp_path / "store").as_uri()
    return f"s3://{BUCKET}/t-{secrets.token_hex(6)}"


@pytest.fixture
def store_options(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "file":
        return {}
    server: MotoServer = request.getfixturevalue("moto")
    return server.options()


@pytest.fixture
async def store(store_url: str, store_options: dict[str, Any]) -> AsyncIterator[ResultStore]:
    opened = open_store(store_url, **store_options)
    yield opened
    await opened.aclose()


@pytest.fixture
def raw(backend: str, store_url: str, request: pytest.FixtureRequest) -> Iterator[RawAccess]:
    if backend == "file":
        yield FileRaw(Path(urlsplit(store_url).path))
        return
    server: MotoServer = request.getfixturevalue("moto")
    client = server.client()
    yield S3Raw(client, urlsplit(store_url).path.strip("/"))
    client.close()
