"""The node agent: a Node object, a tiny scheduler for it, and a kubelet for its pods.

- Registers Node ``config.node_name`` (Ready, capacity from this machine, label
  swerollout.io/node-agent=local, taint swerollout.io/local=true:NoSchedule) and
  keeps its Ready heartbeat fresh.
- Binds pending unscheduled pods that tolerate the taint (and whose nodeSelector
  fits) through the pods/binding subresource; never a pod with scheduling gates
  (Kueue's admission gate), as kube-scheduler waits until they are all removed.
- Runs pods bound to the node with :class:`PodRuntime`, publishes their status
  on pods/status, and finishes graceful deletion the way a kubelet does: stop
  the containers within the grace period, publish a terminal phase, then delete
  the object with gracePeriodSeconds=0.
- On start it re-adopts the pods it was running (state files in each pod's
  directory; live processes recognised by pid + start time), fails pods whose
  state is lost, and kills processes of pods that no longer exist.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import platform
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from swerollout.kube import (
    CONFIGMAPS,
    EVENTS,
    NODES,
    PODS,
    SECRETS,
    AlreadyExists,
    AsyncKubeClient,
    Conflict,
    Gone,
    KubeError,
    NotFound,
)

from . import netns, podnet
from .config import NodeAgentConfig
from .errors import NodeAgentError
from .isolation import bwrap_works, find_bwrap
from .layout import PodDir
from .network import allocate_loopback
from .podspec import Pod, tolerates
from .process import ContainerProcess, ProcessRecord, kill_tree
from .runtime import PodRuntime, now_rfc3339

log = logging.getLogger("swerollout_dev.nodeagent")

TAINT_KEY = "swerollout.io/local"
TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"
COMPONENT = "swerollout-node-agent"
FIELD_MANAGER = "swerollout-node-agent"


def reap_pod_dir(path: Path) -> int:
    """SIGKILL every live container process recorded under a pod directory; return how many."""
    killed = 0
    for record_file in path.glob("containers/*/process.json"):
        record = ProcessRecord.load(record_file)
        if record is not None and ContainerProcess.adopt(record).alive():
            kill_tree(record.pid)
            killed += 1
    podnet.teardown(PodDir(path))
    return killed


def reap_all(root: Path) -> int:
    """Kill every pod process under a node agent root (used by `swerollout dev down`)."""
    pods = root / "pods"
    return sum(reap_pod_dir(p) for p in pods.iterdir()) if pods.is_dir() else 0


@dataclass
class _Worker:
    runtime: PodRuntime
    task: asyncio.Task[None]
    terminating: asyncio.Task[None] | None = None


class NodeAgent:
    def __init__(self, config: NodeAgentConfig, kube: AsyncKubeClient) -> None:
        self.config = config
        self.kube = kube
        if config.isolation == "none":
            self.bwrap: str | None = None
        else:
            self.bwrap = find_bwrap()
            if self.bwrap is None and config.isolation == "bwrap":
                raise NodeAgentError("isolation='bwrap' but bwrap is not installed (apt-get install bubblewrap)")
            problem = bwrap_works(self.bwrap, config.seccomp_file) if self.bwrap else None
            if problem is not None:
                if config.isolation == "bwrap":
                    raise NodeAgentError(f"isolation='bwrap' but bubblewrap cannot run here: {problem}")
                log.warning("bubblewrap is installed but cannot run here (%s); pods will run unisolated", problem)
                self.bwrap = None
        self.network = False
        if config.network != "host":
            why = netns.unavailable()
            if why is not None and config.network == "isolated":
                raise NodeAgentError(f"network='isolated' but pods cannot get network namespaces: {why}")
            if why is not None:
                log.warning("pods will share the host network: %s", why)
            self.network = why is None
        self.egress = config.egress_addresses()
        self.workers: dict[str, _Worker] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.ready = asyncio.Event()
        self._binding: set[str] = set()
        # Requests in flight, bounded below the HTTP client's keep-alive pool (20), so
        # bursts reuse connections instead of paying a TLS handshake per request.
        self._api_slots = asyncio.Semaphore(12)
        self._event_slots = asyncio.Semaphore(4)  # Events never crowd out status writes

    # ---- entry points ---------------------------------------------------------------

    async def run(self) -> None:
        """Register, adopt, then serve until cancelled. Pods keep running after it stops."""
        self.config.root_dir.mkdir(parents=True, exist_ok=True)
        await self.register_node()
        await self.adopt()
        loops = [
            asyncio.create_task(self._heartbeat()),
            asyncio.create_task(self._watch_pods("spec.nodeName=", self._maybe_bind)),
            asyncio.create_task(self._watch_pods(f"spec.nodeName={self.config.node_name}", self._on_pod)),
        ]
        self.ready.set()
        log.info(
            "node agent serving Node %s (isolation: %s, network: %s)",
            self.config.node_name,
            "bubblewrap" if self.bwrap else "none",
            "per pod" if self.network else "host",
        )
        try:
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            for w in self.workers.values():
                w.task.cancel()
            for t in self._background:
                t.cancel()

    async def stop_all_pods(self) -> None:
        """Stop every pod's containers now (used when shutting the node down for good)."""
        await asyncio.gather(
            *(w.runtime.stop(0) for w in self.workers.values() if not w.task.done()), return_exceptions=True
        )
        reap_all(self.config.root_dir)

    # ---- the Node -------------------------------------------------------------------

    def _node_status(self) -> dict[str, Any]:
        cpus = str(os.cpu_count() or 1)
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 1024}Ki"
        disk = shutil.disk_usage(self.config.root_dir)
        resources = {"cpu": cpus, "memory": memory, "pods": "1000", "ephemeral-storage": f"{disk.total // 1024}Ki"}
        now = now_rfc3339()
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "swerollout local node agent is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": socket.gethostname()},
            ],
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": platform.platform(),
                "containerRuntimeVersion": "swerollout-local://0.1",
                "kubeletVersion": "swerollout-node-agent",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
            },
        }

    async def register_node(self) -> None:
        labels = {**self.config.labels, "kubernetes.io/hostname": self.config.node_name, "kubernetes.io/os": "linux"}
        taints = [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT}] if self.config.taint else []
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.config.node_name, "labels": labels},
            "spec": {"taints": taints},
        }
        try:
            await self.kube.create(NODES, body)
        except AlreadyExists:
            pass
        await self.kube.patch_status(NODES, self.config.node_name, {"status": self._node_status()})
        # The API server's TaintNodesByCondition admission adds node.kubernetes.io/not-ready to a new
        # Node; the node lifecycle controller (absent here) would drop it once Ready is posted.
        await self.kube.patch(
            NODES, self.config.node_name, {"metadata": {"labels": labels}, "spec": {"taints": taints}}
        )

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.status_interval_seconds)
            try:
                await self.kube.patch_status(NODES, self.config.node_name, {"status": self._node_status()})
            except NotFound:
                log.warning("Node %s was deleted; registering it again", self.config.node_name)
                try:
                    await self.register_node()
                except KubeError as exc:
                    log.warning("registering Node %s failed: %s", self.config.node_name, exc)
            except KubeError as exc:
                log.warning("node heartbeat failed: %s", exc)

    # ---- watching -------------------------------------------------------------------

    async def _watch_pods(self, field_selector: str, handle: Callable[[str, dict[str, Any]], Awaitable[None]]) -> None:
        """List + watch forever, resuming from the last resourceVersion and relisting on 410 Gone."""
        while True:
            try:
                listing = await self.kube.list(PODS, field_selector=field_selector)
                for item in listing.get("items") or []:
                    await handle("ADDED", item)
                rv = str((listing.get("metadata") or {}).get("resourceVersion", ""))
                while True:
                    stream: AsyncIterator[Any] = self.kube.watch(
                        PODS, field_selector=field_selector, resource_version=rv, timeout_seconds=300
                    )
                    async for event in stream:
                        rv = event.resource_version or rv
                        if event.type != "BOOKMARK":
                            await handle(event.type, event.object)
            except asyncio.CancelledError:
                raise
            except Gone:
                continue
            except Exception as exc:
                log.warning("watching pods (%s) failed, retrying: %s", field_selector, exc)
                await asyncio.sleep(1.0)

    # ---- binding --------------------------------------------------------------------

    def _fits(self, pod: Pod) -> bool:
        if pod.metadata.deletion_timestamp or pod.status.get("phase") in ("Succeeded", "Failed"):
            return False
        if pod.spec.scheduling_gates:
            # Not schedulable until every gate is removed (e.g. Kueue's admission); the API
            # server refuses such a binding, as kube-scheduler never attempts it.
            return False
        labels = {**self.config.labels, "kubernetes.io/hostname": self.config.node_name, "kubernetes.io/os": "linux"}
        if any(labels.get(k) != v for k, v in pod.spec.node_selector.items()):
            return False
        return not self.config.taint or tolerates(pod.spec.tolerations, TAINT_KEY, TAINT_VALUE, TAINT_EFFECT)

    async def _maybe_bind(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        try:
            pod = Pod.model_validate(obj)
        except ValidationError:
            return
        if pod.spec.node_name or not self._fits(pod) or pod.metadata.uid in self._binding:
            return
        # Bind in the background: one slow round trip must not hold up the watch stream.
        self._binding.add(pod.metadata.uid)
        self._spawn(self._bind(pod))

    async def _bind(self, pod: Pod) -> None:
        try:
            async with self._api_slots:
                await self.kube.bind_pod(
                    pod.metadata.namespace, pod.metadata.name, self.config.node_name, pod_uid=pod.metadata.uid
                )
        except (Conflict, NotFound):
            pass  # bound by someone else meanwhile, or gone
        except KubeError as exc:
            log.warning("binding %s failed: %s", pod.key, exc)
        finally:
            self._binding.discard(pod.metadata.uid)

    # ---- running --------------------------------------------------------------------

    async def adopt(self) -> None:
        """Take over pods bound here before this agent started; kill what belongs to no pod."""
        listing = await self.kube.list(PODS, field_selector=f"spec.nodeName={self.config.node_name}")
        known: set[str] = set()
        for item in listing.get("items") or []:
            meta = item.get("metadata") or {}
            known.add(
                PodDir.of(
                    self.config.root_dir, meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
                ).path.name
            )
            await self._on_pod("ADDED", item)
        pods_dir = self.config.root_dir / "pods"
        if pods_dir.is_dir():
            for path in pods_dir.iterdir():
                if path.name not in known:
                    if reap_pod_dir(path):
                        log.info("killed processes of vanished pod %s", path.name)
                    shutil.rmtree(path, ignore_errors=True)

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            pod = Pod.model_validate(obj)
        except ValidationError as exc:
            log.warning("ignoring a pod this agent cannot read: %s", exc)
            return
        uid = pod.metadata.uid
        worker = self.workers.get(uid)
        if kind == "DELETED":
            # Deleted without waiting for us (force delete): stop what still runs, drop the files.
            if worker is not None and worker.terminating is None:
                worker.terminating = self._spawn(self._teardown(pod, worker, delete_object=False))
            elif worker is None:
                path = PodDir.of(self.config.root_dir, pod.metadata.namespace, pod.metadata.name, uid).path
                reap_pod_dir(path)
                shutil.rmtree(path, ignore_errors=True)
            return
        if pod.metadata.deletion_timestamp:
            if worker is None:
                worker = self._start(pod, run=False)
            if worker.terminating is None:
                worker.terminating = self._spawn(self._teardown(pod, worker, delete_object=True))
            return
        if worker is None:
            self._start(pod, run=True)

    def _start(self, pod: Pod, *, run: bool) -> _Worker:
        taken = {w.runtime.pod_ip for w in self.workers.values()}
        runtime = PodRuntime(
            pod,
            self.config,
            _Host(self),
            bwrap=self.bwrap,
            pod_ip=allocate_loopback(pod.metadata.uid, taken),
            egress=self.egress if self.network else None,
        )
        restored = runtime.restore()
        if not restored and pod.status.get("phase") == "Running":
            runtime.failure = (
                "NodeAgentLostPod",
                "the node agent restarted and found no state for this running pod; its containers cannot be adopted",
            )
        finished = pod.status.get("phase") in ("Succeeded", "Failed")

        async def noop() -> None:
            return None

        task = asyncio.create_task(runtime.run() if run and not finished else noop())
        worker = _Worker(runtime, task)
        self.workers[pod.metadata.uid] = worker
        return worker

    async def _teardown(self, pod: Pod, worker: _Worker, *, delete_object: bool) -> None:
        grace = pod.metadata.deletion_grace_period_seconds
        if grace is None:
            grace = pod.spec.termination_grace_period_seconds
        try:
            await worker.runtime.stop(grace)
            try:
                await asyncio.wait_for(worker.task, timeout=max(grace, 0) + 10)
            except (TimeoutError, asyncio.CancelledError):
                pass
            worker.runtime.kill_leftovers()
            worker.runtime.remove_files()  # before the object goes: nothing of the pod outlives it
            # A phase the object already has as terminal stays (an agent restarted without the
            # pod's state would otherwise overwrite Succeeded).
            ended = pod.status.get("phase") in ("Succeeded", "Failed")
            if delete_object and not ended and worker.runtime.end_terminated():
                await self.publish_status(pod, worker.runtime.status)
            if delete_object:
                try:
                    await self.kube.delete(
                        PODS, pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0, uid=pod.metadata.uid
                    )
                except (NotFound, Conflict):
                    pass
        finally:
            worker.runtime.remove_files()
            self.workers.pop(pod.metadata.uid, None)

    # ---- what the runtime asks for ------------------------------------------------------

    async def fetch(self, namespace: str, kind: str, name: str) -> Mapping[str, bytes] | None:
        rt = SECRETS if kind == "Secret" else CONFIGMAPS
        try:
            async with self._api_slots:
                obj = await self.kube.get(rt, name, namespace)
        except NotFound:
            return None
        data: dict[str, bytes] = {}
        if kind == "Secret":
            for k, v in (obj.get("data") or {}).items():
                data[k] = base64.b64decode(v)
            for k, v in (obj.get("stringData") or {}).items():
                data[k] = str(v).encode()
        else:
            for k, v in (obj.get("data") or {}).items():
                data[k] = str(v).encode()
            for k, v in (obj.get("binaryData") or {}).items():
                data[k] = base64.b64decode(v)
        return data

    async def publish_status(self, pod: Pod, status: Callable[[], dict[str, Any] | None]) -> None:
        try:
            async with self._api_slots:
                body = status()
                if body is not None:
                    await self.kube.patch_status(PODS, pod.metadata.name, {"status": body}, pod.metadata.namespace)
        except NotFound:
            pass

    async def event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        # Events are informational: posting one never holds up a pod's progress.
        self._spawn(self._post_event(pod, type_, reason, message))

    async def _post_event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        now = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pod.metadata.name}.", "namespace": pod.metadata.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.metadata.name,
                "namespace": pod.metadata.namespace,
                "uid": pod.metadata.uid,
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT, "host": self.config.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.config.node_name,
        }
        try:
            async with self._event_slots:
                await self.kube.create(EVENTS, body, pod.metadata.namespace)
        except KubeError as exc:
            log.debug("event %s for %s not recorded: %s", reason, pod.key, exc)


class _Host:
    """Adapter: the runtime's :class:`PodHost` view of the agent."""

    def __init__(self, agent: NodeAgent) -> None:
        self._agent = agent

    async def fetch(self, namespace: str, kind: str, name: str) -> Mapping[str, bytes] | None:
        return await self._agent.fetch(namespace, kind, name)

    async def publish_status(self, pod: Pod, status: Callable[[], dict[str, Any] | None]) -> None:
        await self._agent.publish_status(pod, status)

    async def event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        await self._agent.event(pod, type_, reason, message)
