"""Fixtures for the agent tests: a temp git repo and a real swerex-remote serving it."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent_runner.sandbox import Sandbox
from swerex_fixture import SwerexHandle, start_swerex


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A small git repo with one commit; returns its path (base commit via `git rev-parse HEAD`)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("# calc\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


@pytest.fixture
def swerex_server(git_repo: Path) -> Iterator[SwerexHandle]:
    """A swerex-remote whose shells start in `git_repo`; stopped (with its shells) after the test."""
    handle = start_swerex(git_repo)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
async def sandbox(swerex_server: SwerexHandle) -> AsyncIterator[Sandbox]:
    sb = await Sandbox.connect(swerex_server.url, swerex_server.token, timeout=30)
    try:
        yield sb
    finally:
        await sb.close()
