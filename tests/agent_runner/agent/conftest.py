"""Fixtures for the agent tests: a temp git repo and a real swerex-remote serving it.

`swerex_server` (one server per test, shells start in `git_repo`) is the fixture
other areas reuse; outside pytest use `swerex_fixture.start_swerex(workdir)`.
Most agent tests share one server per module (`repo_sandbox`): each test gets
the repo reset to its base commit and a bash session of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent_runner.sandbox import Sandbox
from tests.support.repo_helpers import RepoSandbox, SharedServer, git, make_repo
from tests.support.swerex_fixture import SwerexHandle, start_swerex


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    make_repo(repo)
    return repo


@pytest.fixture
def swerex_server(git_repo: Path) -> Iterator[SwerexHandle]:
    """A swerex-remote whose shells start in `git_repo`; stopped (with its shells) after the test."""
    handle = start_swerex(git_repo)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServer]:
    repo = tmp_path_factory.mktemp("shared") / "repo"
    base = make_repo(repo)
    handle = start_swerex(repo)
    try:
        yield SharedServer(handle, repo, base)
    finally:
        handle.stop()


@pytest.fixture
async def repo_sandbox(shared_server: SharedServer) -> AsyncIterator[RepoSandbox]:
    """The shared repo reset to its base commit, and a fresh bash session on the shared server."""
    git(shared_server.repo, "reset", "-q", "--hard", shared_server.base_commit)
    git(shared_server.repo, "clean", "-q", "-fdx")
    session = f"t{uuid.uuid4().hex[:8]}"
    sb = await Sandbox.connect(shared_server.handle.url, shared_server.handle.token, session=session)
    try:
        yield RepoSandbox(sb, shared_server.repo, shared_server.base_commit, shared_server.handle)
    finally:
        await sb.close(close_session=True)
