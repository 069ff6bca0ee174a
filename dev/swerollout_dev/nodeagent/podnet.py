"""A pod's network: its namespaces and its portal, set up before its containers start.

- the pod namespace: the runner (and every runner-image container) runs there. It
  reaches the host only at the node's egress addresses (``NodeAgentConfig.egress``:
  the ingest API, the policy server) and the task containers only at their
  declared ``containerPort``s, at the pod IP;
- each task-image (sandbox) container's own namespace: loopback alone;
- from the host, the pod IP answers on every declared containerPort (probes, a
  trainer's debugging), as a pod IP does on a real node.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass

from . import netns
from .layout import PodDir
from .podspec import Pod
from .portal import Link, Links
from .process import ContainerProcess, ProcessRecord, kill_tree


@dataclass(frozen=True)
class PodNetwork:
    pod: str  # namespace name of the pod (the runner's)
    containers: dict[str, str]  # task-image container -> its own namespace name

    def of(self, container: str) -> str:
        return self.containers.get(container, self.pod)

    @property
    def names(self) -> list[str]:
        return [self.pod, *self.containers.values()]


def plan(pod: Pod, sandboxed: set[str]) -> PodNetwork:
    uid = pod.metadata.uid
    return PodNetwork(netns.pod_netns(uid), {c: netns.container_netns(uid, c) for c in sorted(sandboxed)})


def links(pod: Pod, net: PodNetwork, pod_ip: str, egress: list[tuple[str, int]]) -> Links:
    def path(name: str) -> str:
        return str(netns.path_of(name))

    out = [
        Link(listen_netns=path(net.pod), listen=(host, port), connect_netns=None, connect=(host, port))
        for host, port in egress
    ]
    for c in [*pod.spec.init_containers, *pod.spec.containers]:
        for p in c.ports:
            target = (pod_ip, p.container_port)
            own = path(net.of(c.name))
            if c.name in net.containers:
                out.append(Link(listen_netns=path(net.pod), listen=target, connect_netns=own, connect=target))
            out.append(Link(listen_netns=None, listen=target, connect_netns=own, connect=target))
    return Links(links=out)


class Portal:
    """The portal process of one pod: started once, adopted after an agent restart."""

    def __init__(self, pod_dir: PodDir) -> None:
        self.dir = pod_dir.network
        self.record_file = self.dir / "process.json"
        self.ready_file = self.dir / "links.ready"

    def running(self) -> ContainerProcess | None:
        record = ProcessRecord.load(self.record_file)
        if record is None:
            return None
        proc = ContainerProcess.adopt(record)
        return proc if proc.alive() else None

    async def start(self, net: PodNetwork, config: Links, extra_addresses: tuple[str, ...]) -> ContainerProcess | None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "namespaces.json").write_text(json.dumps(net.names))
        for name in net.names:
            await asyncio.to_thread(netns.create, name, extra_addresses if name == net.pod else ())
        proc = self.running()
        if proc is not None or not config.links:  # nothing to link: loopback alone, no portal
            return proc
        links_file = self.dir / "links.json"
        links_file.write_text(config.model_dump_json())
        self.ready_file.unlink(missing_ok=True)
        proc = ContainerProcess.spawn(
            [sys.executable, "-m", "swerollout_dev.nodeagent.portal", str(links_file)],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd=self.dir,
            log_path=self.dir / "portal.log",
            exit_file=self.dir / "exit",
        )
        proc.record.dump(self.record_file)
        while not self.ready_file.exists():
            if not proc.alive():
                tail = (self.dir / "portal.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise OSError(f"the pod's network portal failed: {tail[0] if tail else 'no output'}")
            await asyncio.sleep(0.05)
        return proc


def teardown(pod_dir: PodDir) -> None:
    """Kill the portal and delete the pod's namespaces (idempotent)."""
    record = ProcessRecord.load(pod_dir.network / "process.json")
    if record is not None and ContainerProcess.adopt(record).alive():
        kill_tree(record.pid)
    try:
        names = json.loads((pod_dir.network / "namespaces.json").read_text())
    except (OSError, ValueError):
        return
    for name in names:
        if isinstance(name, str) and name.startswith("swr-"):
            netns.delete(name)
