"""One real single-node cluster for the whole run of tests/cluster.

Started with `swerollout cluster up` (as a user does; root), stopped with
`swerollout cluster down` at the end, which must leave nothing behind: the
fixture's teardown fails the run otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from swerollout_dev.cluster.buildimage import base_image_archive
from swerollout_dev.cluster.config import ClusterConfig, ClusterPaths
from tests.support.realnode import RealNode, leftovers, swerollout_cli, wait_for_the_machine

# Not under pytest's tmp dirs: pytest renames old ones before deleting them, and a
# renamed cluster dir hides its mounts from `cluster down`.
WORKDIR = Path("/var/tmp/swerollout-realnode-tests")


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    workdir = WORKDIR
    workdir.mkdir(parents=True, exist_ok=True)
    paths = ClusterPaths.under(workdir)
    node = RealNode(workdir=workdir, paths=paths, config=ClusterConfig())
    # One real node per machine, and every checkout's run uses this workdir: wait for another's to end.
    wait_for_the_machine(paths)
    ours = True
    try:
        # Inside the try: a run interrupted while the node comes up still brings it down.
        up = swerollout_cli("cluster", "up", "--workdir", str(workdir), "--policy", "oracle", timeout=3600)
        # Another run's node, started between the wait and the up, is never ours to stop.
        ours = not (up.returncode != 0 and "already runs" in up.stderr)
        assert up.returncode == 0, f"cluster up failed:\n{up.stdout}\n{up.stderr}"
        node.import_image(base_image_archive())
        yield node
    finally:
        if ours:
            down = swerollout_cli("cluster", "down", "--workdir", str(workdir))
            assert down.returncode == 0, f"cluster down failed:\n{down.stdout}\n{down.stderr}"
            left = leftovers(node.config, paths)
            assert not left, "cluster down left things behind:\n" + "\n".join(left)


@pytest.fixture
def pod_namespace(real_node: RealNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of its own per test, deleted afterwards (the namespace controller runs here)."""
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].rstrip("-")
    real_node.kubectl_ok("create", "namespace", name)
    # The controller-manager creates the default ServiceAccount; pods need it to exist.
    real_node.wait_for(
        f"ServiceAccount {name}/default",
        lambda: real_node.kubectl("get", "serviceaccount", "default", "-n", name).returncode == 0,
        timeout=120,
    )
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false")


def kubelet_kubeconfig(node: RealNode) -> Path:
    return node.paths.configs / "kubelet.kubeconfig"
