"""Where a pod's files live on the node (one module so the agent and `swerollout logs` agree).

<root>/pods/<namespace>_<name>_<uid>/
    state.json                      runtime state, for re-adoption after a restart
    volumes/<volume>/               secret / configMap files, emptyDir contents
    checkouts/<container>/          file:// task image checkouts
    containers/<container>/
        <restartCount>.log          stdout+stderr of each run
        process.json                pid + start time of the running shim
        exec.json                   env, cwd and prefix its exec probes run in (mode 0600)
        exit                        exit code written by the shim
        tmp/                        the container's private /tmp (bubblewrap)
        root/                       mapped mountPaths when unisolated
    network/
        namespaces.json             the pod's network namespaces (deleted with the pod)
        links.json, portal.log      the portal's links and output
        process.json, exit          the portal process, as for a container
<root>/seccomp.bpf                  the compiled seccomp filter (config.seccomp_file)
<root>/mask/{file,dir}              mode 000, bound over private host entries (config.mask_dir)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PodDir:
    path: Path

    @classmethod
    def of(cls, root: Path, namespace: str, name: str, uid: str) -> PodDir:
        return cls(root / "pods" / f"{namespace}_{name}_{uid}")

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def volumes(self) -> Path:
        return self.path / "volumes"

    def checkout(self, container: str) -> Path:
        return self.path / "checkouts" / container

    def container(self, container: str) -> Path:
        return self.path / "containers" / container

    @property
    def network(self) -> Path:
        return self.path / "network"

    def log(self, container: str, restart_count: int) -> Path:
        return self.container(container) / f"{restart_count}.log"


def find_pod_dirs(root: Path, namespace: str, name: str) -> list[Path]:
    """Pod directories of namespace/name (several when a pod of that name was recreated), newest first."""
    base = root / "pods"
    if not base.is_dir():
        return []
    prefix = f"{namespace}_{name}_"
    found = [p for p in base.iterdir() if p.name.startswith(prefix) and "_" not in p.name[len(prefix) :]]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def container_logs(pod_dir: Path, container: str) -> list[Path]:
    """The container's log files, oldest run first."""
    d = pod_dir / "containers" / container
    if not d.is_dir():
        return []
    return sorted((p for p in d.glob("*.log") if p.stem.isdigit()), key=lambda p: int(p.stem))
