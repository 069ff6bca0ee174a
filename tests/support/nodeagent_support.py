"""Helpers for node agent tests (imported by conftest.py and the tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swerollout.kube import NODES, PODS, KubeClient, NotFound


class AgentProcess:
    """``python -m swerollout_dev.nodeagent`` as a child process."""

    def __init__(self, kubeconfig: Path, root: Path, node: str, log: Path, extra: list[str]) -> None:
        self.kubeconfig, self.root, self.node, self.log_path, self.extra = kubeconfig, root, node, log, extra
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, kube: KubeClient) -> AgentProcess:
        """Start the agent and wait until it serves (registered and done adopting)."""
        served_before = self._served()
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "swerollout_dev.nodeagent",
                "--kubeconfig",
                str(self.kubeconfig),
                "--root",
                str(self.root),
                "--node-name",
                self.node,
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        # Generous: a cold Python start on a loaded 2-core machine takes tens of seconds.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                node = kube.get(NODES, self.node)
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
                )
                # the Node may be Ready from a previous agent: wait for this one's own announcement
                if ready and self._served() > served_before:
                    return self
            except NotFound:
                pass
            assert self.popen.poll() is None, self.log_path.read_text()
            time.sleep(0.1)
        raise AssertionError(f"node agent did not register: {self.log_path.read_text()}")

    def _served(self) -> int:
        try:
            return self.log_path.read_text(errors="replace").count("node agent serving")
        except OSError:
            return 0

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def pod_manifest(name: str, node: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "swerollout.io/local", "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "containers": containers,
            **spec,
        },
    }


def wait_pod(
    kube: KubeClient, namespace: str, name: str, check: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            pod = kube.get(PODS, name, namespace)
        except NotFound:
            pod = {}
        if check(pod):
            return pod
        time.sleep(0.1)
    raise AssertionError(f"pod {namespace}/{name} did not reach the expected state: {pod.get('status')}")


def phase_is(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: pod.get("status", {}).get("phase") in phases


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
