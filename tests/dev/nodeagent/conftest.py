"""Fixtures for node agent tests: a real node agent process against the session control plane.

Each test gets its own Node name, so pods of one test are never bound by another
test's agent; pods select the node with nodeSelector and tolerate its taint.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swerollout.kube import NODES, KubeClient, NotFound
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.nodeagent.agent import reap_all
from tests.support.nodeagent_support import AgentProcess


@pytest.fixture
def node_name() -> str:
    return f"na-{secrets.token_hex(4)}"


@pytest.fixture
def agent_factory(
    control_plane: ControlPlane, kube: KubeClient, tmp_path: Path, node_name: str
) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []
    root = tmp_path / "node"

    def start(*extra: str) -> AgentProcess:
        agent = AgentProcess(control_plane.kubeconfig_path, root, node_name, tmp_path / "agent.log", list(extra))
        started.append(agent.start(kube))
        return agent

    yield start
    for agent in started:
        agent.stop()
    reap_all(root)
    try:
        kube.delete(NODES, node_name)
    except NotFound:
        pass


@pytest.fixture
def agent(agent_factory: Callable[..., AgentProcess]) -> AgentProcess:
    return agent_factory()
