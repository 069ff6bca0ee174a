"""The node's binaries (kubelet, kube-proxy, kube-scheduler, kube-controller-manager,
pause), built by ``hack/k8s-bin/build.sh node`` into the same versioned cache as the
control plane's, and the Debian-packaged runtime (containerd, runc, CNI plugins,
iptables) that ``hack/install-cluster-deps.sh`` installs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from swerollout_dev.binaries import BUILD_SCRIPT, BinariesNotFound, bin_dir, binary_version_output, pinned_versions

from .containerd import CNI_BIN_DIR

NODE_BINARIES = ("kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager", "pause")
HOST_TOOLS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "iptables",
    "ip6tables",
    "iptables-save",
    "ip",
    "conntrack",
    "umount",
)


class NodeBinaries(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kubelet: Path
    kube_proxy: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    pause: Path


def _expected(name: str, kubernetes: str) -> str:
    return "swerollout-pause 1" if name == "pause" else f"Kubernetes {kubernetes}"


def find_node_binaries(*, build_if_missing: bool = True) -> NodeBinaries:
    versions = pinned_versions()
    directory = bin_dir(versions)

    def bad() -> list[str]:
        return [
            n
            for n in NODE_BINARIES
            if not (directory / n).is_file()
            or _expected(n, versions.kubernetes) not in binary_version_output(directory / n, ["--version"])
        ]

    missing = bad()
    if missing and build_if_missing and BUILD_SCRIPT.is_file():
        env = dict(os.environ, SWEROLLOUT_BIN_DIR=str(directory))
        proc = subprocess.run(["bash", str(BUILD_SCRIPT), "node"], env=env, stdout=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            raise BinariesNotFound(f"`{BUILD_SCRIPT} node` failed (exit {proc.returncode}); its output is above")
        missing = bad()
    if missing:
        raise BinariesNotFound(
            f"missing or wrong version: {', '.join(missing)} in {directory}; build them once with "
            f"`hack/k8s-bin/build.sh node` from a swerollout checkout (needs Go)"
        )
    return NodeBinaries(**{n.replace("-", "_"): directory / n for n in NODE_BINARIES})


def missing_host_tools() -> list[str]:
    """Debian-packaged tools the node needs that are not installed."""
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    for plugin in ("bridge", "host-local", "loopback"):
        if not (Path(CNI_BIN_DIR) / plugin).is_file():
            missing.append(f"{CNI_BIN_DIR}/{plugin}")
    return missing
