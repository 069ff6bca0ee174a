"""Fixtures for the policy-server tests: real servers on loopback, a tiny task file.

``policy_server(policy, **settings)`` starts an in-process server on a free port
and stops it at teardown (each test gets its own, so pause / weight-version /
fault changes never leak between tests). The tokenizer and torch are loaded once
per process, so a new server costs well under a second after the first.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server import PolicyServerHandle, launch
from tests.support.ps_support import GREETING_V1, INSTANCES, TOKENIZER


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer(TOKENIZER)


@pytest.fixture(scope="session")
def tasks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tasks") / "instances.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in INSTANCES), encoding="utf-8")
    return path


@pytest.fixture
def policy_server(tasks_file: Path) -> Iterator[Callable[..., PolicyServerHandle]]:
    started: list[PolicyServerHandle] = []

    def start(policy: str, **settings: Any) -> PolicyServerHandle:
        if policy == "oracle":
            settings.setdefault("tasks", tasks_file)
        settings.setdefault("tokenizer", TOKENIZER)
        handle = launch(policy, **settings)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture
def greet_repo(tmp_path: Path) -> Path:
    """A real git repository at the task's base state (for applying the oracle's command)."""
    repo = tmp_path / "greet"
    repo.mkdir()
    (repo / "greet.py").write_text(GREETING_V1, encoding="utf-8")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], cwd=repo, check=True)
    return repo
