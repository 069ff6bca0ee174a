"""How fast the local node agent takes pods from bound to Running, on this machine.

200 light pods (one container, ``sleep``) are created through a real
kube-apiserver; a watch records, per pod, when it was created, when it was
bound (spec.nodeName first seen) and when its phase first read Running.
Reported: bind-to-Running latency p50/p99, create-to-Running p50, and pods
per second (first create to last Running).

Baseline, measured in the same run: the raw cost of spawning the same 200
processes with subprocess and no API at all (same command, unisolated), as
processes per second. The ratio says how much of the machine's process-spawn
throughput the agent delivers as pods through the API.

Run: ``python -m bench.nodeagent_pods`` (prints a report); ``run()`` returns the numbers.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from swerollout.kube import NAMESPACES, NODES, PODS, KubeClient, NotFound
from swerollout_dev.controlplane import ControlPlane

PODS_COUNT = 200
COMMAND = ["sleep", "3"]
NODE = "bench-node"
NAMESPACE = "bench"
PROFILE = os.environ.get("BENCH_PROFILE", "").split()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def baseline_spawn(count: int = PODS_COUNT) -> float:
    """Processes per second when spawning ``count`` copies of the pod's command directly."""
    began = time.perf_counter()
    procs = [
        subprocess.Popen(
            COMMAND,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(count)
    ]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
    return count / elapsed


def _watch(kube: KubeClient, rv: str, seen: dict[str, dict[str, float]], done: threading.Event) -> None:
    for event in kube.watch(PODS, NAMESPACE, resource_version=rv, timeout_seconds=300):
        now = time.perf_counter()
        name = event.object["metadata"]["name"]
        marks = seen.setdefault(name, {})
        if event.object.get("spec", {}).get("nodeName") and "bound" not in marks:
            marks["bound"] = now
        if event.object.get("status", {}).get("phase") in ("Running", "Succeeded") and "running" not in marks:
            marks["running"] = now
        if sum(1 for m in seen.values() if "running" in m) >= PODS_COUNT or done.is_set():
            return


def run(pods: int = PODS_COUNT) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-nodeagent-") as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(workdir / "cp").start()
        agent: subprocess.Popen[bytes] | None = None
        try:
            with plane.admin_client() as kube:
                kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
                agent = subprocess.Popen(
                    [
                        sys.executable,
                        *PROFILE,
                        "-m",
                        "swerollout_dev.nodeagent",
                        "--kubeconfig",
                        str(plane.kubeconfig_path),
                        "--root",
                        str(workdir / "node"),
                        "--node-name",
                        NODE,
                        "--stop-pods-on-exit",
                    ],
                    stdout=open(workdir / "agent.log", "wb"),
                    stderr=subprocess.STDOUT,
                )
                while True:
                    try:
                        kube.get(NODES, NODE)
                        break
                    except NotFound:
                        time.sleep(0.1)
                rv = kube.list(PODS, NAMESPACE)["metadata"]["resourceVersion"]
                seen: dict[str, dict[str, float]] = {}
                done = threading.Event()
                # One client for both threads (it is thread-safe): closing it at the end also
                # ends a watch that is still open.
                watcher = threading.Thread(target=_watch, args=(kube, rv, seen, done), daemon=True)
                watcher.start()
                created: dict[str, float] = {}
                began = time.perf_counter()
                for i in range(pods):
                    name = f"p{i:04d}"
                    created[name] = time.perf_counter()
                    kube.create(
                        PODS,
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "metadata": {"name": name},
                            "spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 0,
                                "tolerations": [{"key": "swerollout.io/local", "operator": "Exists"}],
                                "nodeSelector": {"kubernetes.io/hostname": NODE},
                                "containers": [{"name": "main", "image": "swerollout:bench", "command": COMMAND}],
                            },
                        },
                        NAMESPACE,
                    )
                create_seconds = time.perf_counter() - began
                watcher.join(timeout=300)
                done.set()
                complete = {n: m for n, m in seen.items() if "bound" in m and "running" in m}
                bind_to_running = [m["running"] - m["bound"] for m in complete.values()]
                create_to_running = [complete[n]["running"] - created[n] for n in complete if n in created]
                last = max(m["running"] for m in complete.values())
                pods_per_second = len(complete) / (last - began)
        finally:
            if agent is not None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(60)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait()
            plane.stop()
        baseline = baseline_spawn(pods)
    return {
        "pods": pods,
        "pods_running": len(complete),
        "cpus": os.cpu_count(),
        "create_seconds": round(create_seconds, 3),
        "bind_to_running_p50_s": round(statistics.median(bind_to_running), 4),
        "bind_to_running_p99_s": round(_percentile(bind_to_running, 0.99), 4),
        "create_to_running_p50_s": round(statistics.median(create_to_running), 4),
        "pods_per_second": round(pods_per_second, 2),
        "baseline_spawns_per_second": round(baseline, 2),
        "ratio_vs_baseline": round(pods_per_second / baseline, 4),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
