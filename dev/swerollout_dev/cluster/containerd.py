"""containerd for the kubelet: its configuration, the local pause image, image import,
and removing every trace of it.

containerd runs with a root under the cluster directory and its runtime state,
sockets included, under /run/swerollout-cluster, so it never touches a system
containerd's /var/lib/containerd or /run/containerd.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from . import images
from .config import ClusterConfig, ClusterPaths

PAUSE_IMAGE = "swerollout.local/pause:1"
K8S_NAMESPACE = "k8s.io"  # the containerd namespace the CRI plugin uses
CNI_BIN_DIR = "/usr/lib/cni"  # where Debian's containernetworking-plugins installs


def config_toml(paths: ClusterPaths) -> str:
    # restrict_oom_score_adj: these VMs withhold CAP_SYS_RESOURCE, so runc cannot
    # lower a container's oom_score_adj and every sandbox failed with "can't get
    # final child's PID from pipe". With it, containerd never asks for a lower value.
    return f'''version = 2
root = "{paths.containerd_root / "root"}"
state = "{paths.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.containerd_root / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's own state, which would default to /run/containerd/runc: with ours, removed with it.
        Root = "{paths.containerd_state / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{paths.cni_conf_dir}"
'''


def cni_conflist(config: ClusterConfig, paths: ClusterPaths) -> str:
    """The bridge network: no masquerade, and routes only to the service and node ranges."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "swerollout",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": config.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": config.bridge_subnet, "gateway": config.bridge_gateway}]],
                        "routes": [{"dst": config.service_range}, {"dst": config.node_range}],
                        "dataDir": str(paths.cni_ipam_dir),
                    },
                }
            ],
        },
        indent=2,
    )


def write_configs(config: ClusterConfig, paths: ClusterPaths) -> Path:
    paths.configs.mkdir(parents=True, exist_ok=True)
    paths.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    (paths.cni_conf_dir / "10-swerollout.conflist").write_text(cni_conflist(config, paths))
    toml = paths.configs / "containerd.toml"
    toml.write_text(config_toml(paths))
    return toml


def ctr(paths: ClusterPaths, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(paths.containerd_socket), "--namespace", K8S_NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def pause_image_archive(pause_binary: Path, dest: Path) -> Path:
    """A FROM-scratch image holding only the static pause binary: no registry is
    reachable to pull registry.k8s.io/pause."""
    with images.scratch_dir() as scratch:
        layer = images.bytes_layer({"pause": (pause_binary.read_bytes(), 0o755)}, Path(scratch) / "layer.tar")
        config = images.ImageConfig(env=(), entrypoint=("/pause",), user="65535:65535")
        return images.docker_archive(PAUSE_IMAGE, [layer], config, dest)


def import_image(paths: ClusterPaths, archive: Path) -> None:
    """Load an image archive (docker-archive or oci-archive) where the kubelet finds it."""
    proc = ctr(paths, "images", "import", "--no-unpack", str(archive))
    if proc.returncode != 0:
        raise RuntimeError(f"ctr images import {archive} failed: {proc.stderr.strip()}")


def wait_socket(paths: ClusterPaths, alive: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("containerd exited during startup")
        if paths.containerd_socket.exists() and ctr(paths, "version", timeout=10).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"containerd did not answer on {paths.containerd_socket} within {timeout:.0f}s")


# containerd 1.6 puts every shim's socket in this directory whatever its own state
# dir is (the path is compiled in), named by a hash of our address, namespace and id.
SHIM_SOCKET_DIR = Path("/run/containerd/s")


def shim_sockets(paths: ClusterPaths) -> list[Path]:
    """The shim sockets our containerd's tasks use (they outlive the shims), found
    from the task ids in its state dir: never another containerd's."""
    tasks = paths.containerd_state / "io.containerd.runtime.v2.task"
    found = []
    for namespace in tasks.iterdir() if tasks.is_dir() else ():
        for task in namespace.iterdir():
            key = f"{paths.containerd_socket}/{namespace.name}/{task.name}"
            socket = SHIM_SOCKET_DIR / hashlib.sha256(key.encode()).hexdigest()
            if socket.exists() or socket.is_symlink():
                found.append(socket)
    return found


def remove_shim_sockets(paths: ClusterPaths) -> None:
    for socket in shim_sockets(paths):
        socket.unlink(missing_ok=True)
    # Made for our shims when no other containerd runs here; rmdir only removes it empty.
    for directory in (SHIM_SOCKET_DIR, SHIM_SOCKET_DIR.parent):
        try:
            directory.rmdir()
        except OSError:
            pass


def shim_pids(paths: ClusterPaths) -> list[int]:
    """containerd-shim processes of our containerd (they outlive it by design)."""
    found = []
    needle = str(paths.containerd_socket).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and needle in cmdline:
            found.append(int(entry.name))
    return found


def mounts_under(*roots: Path) -> list[str]:
    """Mount points at or below ``roots``, deepest first (so they unmount in order)."""
    prefixes = [str(r) for r in roots]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(*roots: Path) -> list[str]:
    problems = []
    for _ in range(3):  # stacked mounts (the kubelet bind-mounts its own root) need passes
        points = mounts_under(*roots)
        if not points:
            return []
        for point in points:
            proc = subprocess.run(["umount", "-l", point], capture_output=True, text=True, check=False)
            if proc.returncode != 0 and "not mounted" not in proc.stderr:
                problems.append(f"umount {point}: {proc.stderr.strip()}")
    left = mounts_under(*roots)
    return problems + [f"still mounted: {p}" for p in left]


def pod_netns_files() -> list[Path]:
    """Network namespaces containerd's CRI created for pod sandboxes: it always names
    them cni-<uuid> under /var/run/netns (only one cluster runs per machine)."""
    netns = Path("/var/run/netns")
    return sorted(netns.glob("cni-*")) if netns.is_dir() else []


def remove_netns() -> list[str]:
    problems = []
    for path in pod_netns_files():
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        try:
            path.unlink()
        except OSError as exc:
            problems.append(f"netns {path}: {exc}")
    return problems


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
