"""Where the cluster lives on this machine: addresses, names and directories.

Only one cluster can run per machine: the kubelet and kube-proxy program the
host's iptables and the CNI bridge is a host interface. Everything machine-wide
therefore has fixed names (all starting with ``swr``), and a lock under
:data:`RUNTIME_DIR` keeps a second cluster out. The addresses sit in private
ranges that none of this project's other modes use: the node agent of
`dev up` gives pods 127.x.y.z loopback addresses, never these.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# Short and fixed: unix socket paths are limited to 107 bytes, and `cluster down`
# must find the sockets and runtime state of a cluster whose supervisor is gone.
RUNTIME_DIR = Path("/run/swerollout-cluster")
DEFAULT_CLUSTER_DIR = Path(".swerollout") / "cluster"


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_name: str = "swerollout-node"
    node_ip: str = "10.245.0.1"
    """The node's InternalIP, on a dummy interface of its own. Pods reach the API
    server and the host services through it; the kubelet serves on it."""
    node_range: str = "10.245.0.0/16"
    """Blackholed except the node IP itself."""
    pod_range: str = "10.244.0.0/16"
    """The cluster's pod range; blackholed except the bridge's subnet."""
    bridge_subnet: str = "10.244.0.0/24"
    bridge_gateway: str = "10.244.0.1"
    service_range: str = "10.96.0.0/16"
    """ClusterIPs. Blackholed: one that kube-proxy did not rewrite goes nowhere."""
    bridge: str = "swr0"
    node_link: str = "swr-node0"
    cluster_domain: str = "cluster.local"

    @property
    def api_service_ip(self) -> str:
        """The first address of the service range: the ``kubernetes`` Service."""
        return str(ipaddress.ip_network(self.service_range)[1])

    @property
    def dns_service_ip(self) -> str:
        """Cluster DNS is served on the node IP (see dns.py)."""
        return self.node_ip

    def blackholes(self) -> list[str]:
        return [self.node_range, self.pod_range, self.service_range]


class ClusterPaths(BaseModel):
    """Files of one cluster: persistent ones under ``root``, runtime ones under RUNTIME_DIR."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path
    runtime: Path = RUNTIME_DIR

    @classmethod
    def under(cls, workdir: str | Path | None) -> ClusterPaths:
        base = Path(workdir) if workdir else Path.cwd()
        return cls(root=(base / DEFAULT_CLUSTER_DIR).resolve())

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig for the user."""
        return self.root / "kubeconfig"

    @property
    def controlplane(self) -> Path:
        return self.root / "controlplane"

    @property
    def pki(self) -> Path:
        return self.controlplane / "pki"

    @property
    def node_pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def configs(self) -> Path:
        return self.root / "config"

    @property
    def lock(self) -> Path:
        return self.runtime / "lock"

    @property
    def containerd_state(self) -> Path:
        return self.runtime / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.runtime / "containerd.sock"

    @property
    def saved_sysctls(self) -> Path:
        """Host sysctl values changed by `cluster up`, restored by `cluster down`."""
        return self.runtime / "sysctls.json"
