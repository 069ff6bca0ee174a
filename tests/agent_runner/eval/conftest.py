"""Eval-mode fixtures: the bundled tasks materialized once, and fresh sandboxes per evaluation.

A fresh sandbox is what the eval pod gets: a private clone of the task repository at
its base commit, served by its own real swerex-remote (the agent tests' helper).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agent_runner.sandbox import Sandbox
from swerollout import instances
from swerollout.api.v1alpha1 import Instance
from swerollout_dev import tasks
from tests.support.evalkit import SandboxFactory, start_swerex

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="session")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, instances.SWEBenchInstance]:
    """Task folder name -> materialized instance (image file://...)."""
    dest = tmp_path_factory.mktemp("tasks")
    instances = tasks.materialize_tasks(dest)
    return {i.image.rsplit("/", 1)[-1]: i for i in instances}


@pytest.fixture
def fresh_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxFactory]:
    """``async with fresh_sandbox(instance) as (sandbox, workdir)``: a new checkout and server each time."""
    # The eval scripts run `python -m pytest`; the sandbox's python is this venv's.
    monkeypatch.setenv("PATH", VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    handles = []
    counter = iter(range(1000))

    @asynccontextmanager
    async def factory(instance: Instance) -> AsyncIterator[tuple[Sandbox, str]]:
        checkout = tasks.checkout(instance.image, instance.base_commit, tmp_path / f"checkout-{next(counter)}")
        handle = start_swerex(checkout)
        handles.append(handle)
        try:
            sandbox = await Sandbox.connect(handle.url, handle.token, timeout=30)
            try:
                yield sandbox, str(checkout)
            finally:
                await sandbox.close()
        finally:
            handle.stop()

    yield factory
    for handle in handles:
        handle.stop()
