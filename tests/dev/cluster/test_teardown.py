"""What `cluster up` clears of a cluster that was killed instead of stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerollout.kube import CONFIGMAPS, NotFound
from swerollout_dev.cluster import teardown
from swerollout_dev.cluster.config import ClusterPaths
from swerollout_dev.controlplane import ControlPlane


def test_a_killed_clusters_objects_do_not_seed_the_next_cluster(tmp_path: Path) -> None:
    paths = ClusterPaths(root=tmp_path / "cluster")
    plane = ControlPlane(paths.controlplane).start()
    try:
        with plane.admin_client() as kube:
            kube.create(CONFIGMAPS, {"metadata": {"name": "from-the-killed-run"}, "data": {"k": "v"}}, "default")
    finally:
        # What a SIGKILLed supervisor leaves: its children die with it (PDEATHSIG), the
        # etcd data stays, since only a supervisor that stops removes it.
        plane.stop()
    assert teardown.forget_control_plane(paths) is True

    fresh = ControlPlane(paths.controlplane).start()
    try:
        with fresh.admin_client() as kube, pytest.raises(NotFound):
            kube.get(CONFIGMAPS, "from-the-killed-run", "default")
    finally:
        fresh.stop(delete_data=True)
    # Nothing left to forget once a cluster stopped as it should.
    assert teardown.forget_control_plane(paths) is False
