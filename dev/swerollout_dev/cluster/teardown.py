"""Remove every trace of a cluster: processes, container state, mounts, network
namespaces, interfaces, routes, iptables rules, cgroups, host sysctls.

Idempotent, and safe to run when nothing is there: the supervisor runs it when
it stops, `cluster down` runs it again in case the supervisor died, and `cluster
up` runs it first to clear what a crashed cluster left.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

from swerollout_dev.controlplane import discard_data
from swerollout_dev.controlplane.processes import is_alive

from . import cgroups, containerd, network
from .config import ClusterConfig, ClusterPaths
from .state import ClusterState

# Reverse start order: nothing recreates what was just removed.
STOP_ORDER = (
    "policy-server",
    "kube-proxy",
    "kubelet",
    "containerd",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)


def stop_recorded(state: ClusterState | None, grace: float = 10.0) -> None:
    """Stop the processes a state file names, if they are still the same processes."""
    if state is None:
        return
    for name in STOP_ORDER:
        comp = state.components.get(name)
        if comp is None or comp.pid is None or not comp.alive():
            continue
        os.kill(comp.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and is_alive(comp.pid):
            time.sleep(0.1)
        if is_alive(comp.pid):
            os.kill(comp.pid, signal.SIGKILL)


def forget_control_plane(paths: ClusterPaths) -> bool:
    """Remove the etcd data a cluster in ``paths`` kept; True when a crashed one had left some.

    A supervisor that stops removes it itself, so data found here outlived a killed
    cluster. It must not seed the next one: clean_node has just removed every pod's
    containers, and a control plane that still lists that cluster's Deployments, pods
    and Endpoints starts with objects no node runs (the chart's upgrade then waits on
    an operator pod that cannot reach the API Service). `cluster up` always starts a
    fresh cluster, after a crash as after `cluster down`.
    """
    return discard_data(paths.controlplane)


def clean_node(config: ClusterConfig, paths: ClusterPaths) -> list[str]:
    """Everything but the control-plane processes; returns what could not be removed."""
    problems: list[str] = []
    problems += cgroups.kill_and_remove()  # the containers themselves
    containerd.kill_pids(containerd.shim_pids(paths))
    containerd.remove_shim_sockets(paths)
    problems += containerd.remove_netns()
    problems += containerd.unmount_all(paths.kubelet_root, paths.containerd_root, paths.containerd_state)
    problems += network.tear_down(config, paths.saved_sysctls)
    problems += cgroups.kill_and_remove()  # a shim may have started one more
    for directory in (paths.containerd_state, paths.containerd_root, paths.kubelet_root, paths.cni_ipam_dir):
        shutil.rmtree(directory, ignore_errors=True)
        if directory.exists():
            problems.append(f"could not remove {directory}")
    for socket in (paths.containerd_socket, paths.containerd_socket.with_name(paths.containerd_socket.name + ".ttrpc")):
        socket.unlink(missing_ok=True)
    return problems
