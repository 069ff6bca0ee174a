"""A handle on the real single-node cluster, started as a user starts it:
`swerollout cluster up`, and stopped with `swerollout cluster down`.

One cluster serves the whole test run (tests/cluster/conftest.py); only one can
run per machine, so a second run waits for the machine lock's holder to finish.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.instances import SWEBenchInstance, to_api_instance
from swerollout_dev.binaries import find_binaries
from swerollout_dev.cluster import containerd
from swerollout_dev.cluster.config import ClusterConfig, ClusterPaths
from swerollout_dev.cluster.state import ClusterState
from swerollout_dev.tasks import INDEX_FILE, load_instances


def swerollout_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )


@dataclass
class RealNode:
    workdir: Path
    paths: ClusterPaths
    config: ClusterConfig

    def state(self) -> ClusterState:
        state = ClusterState.read(self.paths.state)
        assert state is not None, "the cluster is not running"
        return state

    def kubectl(
        self, *args: str, input: str | None = None, kubeconfig: Path | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        config = kubeconfig or self.paths.kubeconfig
        return subprocess.run(
            [str(find_binaries().kubectl), f"--kubeconfig={config}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=dict(os.environ, KUBECACHEDIR=str(self.paths.root / "kube-cache")),
        )

    def kubectl_ok(self, *args: str, input: str | None = None, timeout: float = 180) -> str:
        proc = self.kubectl(*args, input=input, timeout=timeout)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout

    def get(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl_ok("get", "-o", "json", *args)))

    def wait_for(self, what: str, predicate: Any, timeout: float = 300, interval: float = 1.0) -> Any:
        """Poll ``predicate()`` until it returns something truthy; fail with ``what``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")

    def import_image(self, archive: Path) -> None:
        containerd.import_image(self.paths, archive)


MACHINE_WAIT = 7200.0  # seconds a run waits for another real node on this machine to stop


def wait_for_the_machine(paths: ClusterPaths, timeout: float = MACHINE_WAIT) -> None:
    """Until no real node runs on this machine (its supervisor holds the machine's lock for
    its whole life) and none runs from `paths` (another checkout's run of this suite uses the
    same workdir). `cluster up` refuses at once when either is taken, and a fixture that
    then ran `cluster down` in its cleanup would stop the other run's node."""
    paths.runtime.mkdir(parents=True, exist_ok=True)
    deadline, told = time.monotonic() + timeout, False
    while True:
        with open(paths.lock, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip()
            else:
                fcntl.flock(lock, fcntl.LOCK_UN)
                state = ClusterState.read(paths.state)
                holder = "" if state is None or not state.supervisor.alive() else f"a cluster in {paths.root}"
        if not holder:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"another real node ran for {timeout:.0f}s: {holder}")
        if not told:
            print(f"waiting for the machine's real node to stop ({holder})", file=sys.stderr)
            told = True
        time.sleep(5)


def leftovers(config: ClusterConfig, paths: ClusterPaths) -> list[str]:
    """What a stopped cluster left on this machine (empty when clean)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # A shell that only names the paths (another run's command waiting for the lock) is
        # not a leftover: the node's own processes (containerd, its shims, the kubelet, ...)
        # are started directly, never through a shell.
        shell = Path(cmdline.split(" ", 1)[0]).name in ("bash", "sh", "dash", "flock")
        if (str(paths.root) in cmdline or str(paths.runtime) in cmdline) and not shell:
            found.append(f"process {entry.name}: {cmdline[:200]}")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point.startswith((str(paths.root), str(paths.runtime), "/var/run/netns/cni-", "/run/netns/cni-")):
            found.append(f"mount {point}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    for name in (config.bridge, config.node_link):
        if f": {name}:" in links or f": {name}@" in links:
            found.append(f"interface {name}")
    for tool in ("iptables-save", "ip6tables-save"):
        dump = subprocess.run([tool], capture_output=True, text=True, check=False).stdout
        found += [f"{tool}: {line}" for line in dump.splitlines() if "KUBE-" in line or "SWEROLLOUT-" in line]
    routes = subprocess.run(["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True).stdout
    found += [f"route {r}" for r in routes.splitlines() if any(c in r for c in config.blackholes())]
    for cg in Path("/sys/fs/cgroup").glob("*/kubepods"):
        found.append(f"cgroup {cg}")
    # containerd 1.6 writes its shims' sockets here whatever its state dir; no other
    # containerd runs on the machines this suite runs on, so any dead one is ours.
    for sock in sorted(containerd.SHIM_SOCKET_DIR.glob("*")) if containerd.SHIM_SOCKET_DIR.is_dir() else []:
        if not _listening(sock):
            found.append(f"dead shim socket {sock}")
    for directory in (paths.containerd_root, paths.containerd_state, paths.kubelet_root):
        if directory.exists():
            found.append(f"directory {directory}")
    return found


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


TERMINAL = {"Succeeded", "Failed"}
# The fully qualified resource, so no short name or category can ever make it ambiguous.
SWEROLLOUTS = "swerollouts.swerollout.io"


def rollout_body(
    name: str, instance: SWEBenchInstance, endpoint: str, namespace: str, batch: str = "realnode", **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {api.LABEL_BATCH: batch}},
        "spec": {
            "instance": to_api_instance(instance).to_wire(),
            "inference": {"endpoint": endpoint, "tokenizer": "qwen-2.5"},
            # The real node is this 2-core machine: at the default 500m per sandbox only three
            # rollouts fit beside the operator, the rest wait Unschedulable, and on a loaded
            # machine their wait outran the startup deadline. A small request lets a whole test
            # batch schedule at once; the deadline still bounds a pod that never starts.
            "sandbox": {
                "startupTimeoutSeconds": 600,
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}},
            },
        },
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body["spec"].get(key), dict):
            body["spec"][key].update(value)
        else:
            body["spec"][key] = value
    return body


class Rollouts:
    """SWERollouts in one namespace of the real node, through kubectl as a user drives them."""

    def __init__(self, node: RealNode, namespace: str) -> None:
        self.node, self.namespace = node, namespace
        self.instances = load_instances(node.paths.root / "tasks" / INDEX_FILE)

    def create(self, name: str, endpoint: str, task: int = 0, **spec: Any) -> None:
        body = rollout_body(name, self.instances[task], endpoint, self.namespace, **spec)
        self.node.kubectl_ok("apply", "-f", "-", input=json.dumps(body))

    def status(self, name: str) -> dict[str, Any]:
        proc = self.node.kubectl("get", SWEROLLOUTS, name, "-n", self.namespace, "-o", "json")
        return dict(json.loads(proc.stdout).get("status") or {}) if proc.returncode == 0 else {}

    def wait_phase(self, name: str, phases: set[str], timeout: float = 420) -> dict[str, Any]:
        return dict(
            self.node.wait_for(
                f"{name} in {phases}",
                lambda: (s := self.status(name)) and s.get("phase") in phases and s,
                timeout=timeout,
                interval=1.0,
            )
        )

    def set_suspend(self, name: str, value: bool) -> None:
        self.node.kubectl_ok(
            "patch",
            SWEROLLOUTS,
            name,
            "-n",
            self.namespace,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"suspend": value}}),
        )
