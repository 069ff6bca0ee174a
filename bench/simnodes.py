"""Simulated nodes for the scale bench: KWOK nodes, and a binder in place of a scheduler.

KWOK (sigs.k8s.io/kwok, built from its Go module by `hack/k8s-bin/build.sh kwok`) plays
the kubelet of every Node labelled `swerollout.io/simulated=true`: the node is Ready, a
pod bound to it is Running and Ready at once (no container runs anywhere; the stages are
bench/kwok_stages.yaml), and a deleted pod is gone at once. What a runner does in the pod
is played by bench/simrunner.py over the real ingest API.

The dev control plane has no scheduler (the embedded node agent binds its own pods), so
`Binder` binds each unbound pod of the watched namespace to a simulated node, round
robin, through the pods/binding subresource, the one write a scheduler makes per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from swerollout.kube import NODES, PODS, ApiError, AsyncKubeClient, Conflict, NotFound, TransportError
from swerollout_dev.binaries import BUILD_SCRIPT
from swerollout_dev.controlplane import ControlPlane

STAGES = Path(__file__).with_name("kwok_stages.yaml")
NODE_LABEL = "swerollout.io/simulated"
POD_CIDR = "10.64.0.0/10"
"""Pod IPs KWOK hands out: room for 4 million pods (its default /24 runs out at 254)."""


def kwok_binary() -> Path:
    """The cached kwok binary, built on first use (a few minutes, once)."""
    out = subprocess.run([str(BUILD_SCRIPT), "kwok"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} kwok failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "kwok"


def node_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: "true", "kubernetes.io/hostname": name, "type": "kwok"},
            # KWOK's own convention: tools that know it (kwokctl, dashboards) see a fake node.
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        # No pod of a real kubelet may land here by accident.
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
    }


class SimulatedNodes:
    """A KWOK process managing `count` nodes of one control plane."""

    def __init__(self, plane: ControlPlane, workdir: Path, count: int) -> None:
        self.plane = plane
        self.workdir = workdir
        self.count = count
        self.names = [f"kwok-node-{i}" for i in range(count)]
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, kube: AsyncKubeClient) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        binary = await asyncio.to_thread(kwok_binary)
        log = open(self.workdir / "kwok.log", "wb")
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--config",
                str(STAGES),
                "--kubeconfig",
                str(self.plane.kubeconfig_path),
                f"--manage-nodes-with-label-selector={NODE_LABEL}=true",
                f"--cidr={POD_CIDR}",
                # No node leases (nothing here reads them, and their namespace does not exist).
                "--node-lease-duration-seconds=0",
                "--server-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        for name in self.names:
            with contextlib.suppress(Conflict):
                await kube.create(NODES, node_body(name))
        await self._wait_ready(kube)

    async def _wait_ready(self, kube: AsyncKubeClient, timeout: float = 120.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kwok exited ({self.proc.returncode}): {self.log_tail()}")
            items = (await kube.list(NODES, label_selector=f"{NODE_LABEL}=true"))["items"]
            ready = [
                n
                for n in items
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            ]
            if len(ready) >= self.count:
                return
            if loop.time() > deadline:
                raise RuntimeError(
                    f"{len(ready)} of {self.count} kwok nodes Ready after {timeout:.0f} s: {self.log_tail()}"
                )
            await asyncio.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.workdir / "kwok.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Binder:
    """The scheduler's one write per pod: bind every unbound pod of `namespace` to a
    simulated node, round robin. Counted apart from the operator's writes."""

    def __init__(self, kube: AsyncKubeClient, namespace: str, nodes: list[str], parallel: int = 32) -> None:
        self.kube = kube
        self.namespace = namespace
        self.nodes = nodes
        self.bound = 0
        self.posted = 0
        """Binding requests sent (a relist may send one for a pod bound meanwhile: refused)."""
        self._next = 0
        self._sem = asyncio.Semaphore(parallel)
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)

    def _bind_soon(self, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName") or (pod["metadata"].get("deletionTimestamp")):
            return
        node = self.nodes[self._next % len(self.nodes)]
        self._next += 1
        task = asyncio.create_task(self._bind(pod["metadata"]["name"], pod["metadata"]["uid"], node))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _bind(self, name: str, uid: str, node: str) -> None:
        async with self._sem:
            # A dropped connection loses the answer, not always the binding: post again; a
            # binding that did land answers Conflict the second time.
            while True:
                self.posted += 1
                try:
                    await self.kube.bind_pod(self.namespace, name, node, pod_uid=uid)
                    self.bound += 1
                    return
                except (Conflict, NotFound):
                    return  # bound already (a relist saw it twice), or deleted meanwhile
                except TransportError as exc:
                    print(f"binder: {exc}; binding {name} again", file=sys.stderr)
                    await asyncio.sleep(1)

    async def _run(self) -> None:
        selector = "spec.nodeName="
        while True:
            try:
                listing = await self.kube.list(PODS, self.namespace, field_selector=selector)
                for pod in listing["items"]:
                    self._bind_soon(pod)
                version = listing["metadata"]["resourceVersion"]
                async for event in self.kube.watch(
                    PODS, self.namespace, field_selector=selector, resource_version=version, timeout_seconds=300
                ):
                    if event.type == "ADDED":
                        self._bind_soon(event.object)
            except asyncio.CancelledError:
                raise
            except (ApiError, TransportError) as exc:
                # An API server loaded past its limits drops connections (a 5,000 step lost its
                # binder to one): list and watch again, as an informer does.
                print(f"binder: {exc}; listing again", file=sys.stderr)
                await asyncio.sleep(1)
