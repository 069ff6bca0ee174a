"""Helpers for agent tests: a throwaway git repo and the handles the fixtures yield."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent_runner.sandbox import Sandbox
from tests.support.swerex_fixture import SwerexHandle


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(repo: Path) -> str:
    """A small git repo with one commit; returns the base commit."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("# calc\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return git(repo, "rev-parse", "HEAD").strip()


@dataclass
class SharedServer:
    handle: SwerexHandle
    repo: Path
    base_commit: str


@dataclass
class RepoSandbox:
    sandbox: Sandbox
    repo: Path
    base_commit: str
    handle: SwerexHandle
