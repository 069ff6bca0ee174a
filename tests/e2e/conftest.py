"""One dev stack per e2e module (`swerollout dev up`); the handles are in tests.support.devstack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swerollout.dev.stack.paths import DevPaths
from swerollout.dev.stack.state import DevState
from swerollout.dev.tasks import load_instances, materialize_tasks
from swerollout.kube import KubeClient
from tests.support.devstack import DevStack, swerollout_cli


@pytest.fixture(scope="module")
def dev_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    workdir = tmp_path_factory.mktemp("devstack")
    tasks = workdir / "tasks"
    materialize_tasks(tasks)
    up = swerollout_cli(
        "dev", "up", "--policy", "oracle", "--tasks", str(tasks / "instances.jsonl"), "--workdir", str(workdir),
    )
    paths = DevPaths.under(workdir)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = DevState.read(paths.state)
        assert state is not None and state.sglang_url
        with KubeClient.from_kubeconfig(paths.kubeconfig) as kube:
            yield DevStack(workdir, paths, kube, state.sglang_url, load_instances(tasks / "instances.jsonl"))
    finally:
        down = swerollout_cli("dev", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stdout + down.stderr
