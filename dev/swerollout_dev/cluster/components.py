"""Configuration and command lines of the node's Kubernetes components.

Each choice that departs from a stock install is a capability these machines
lack, handled in configuration (docs/real-node.md lists them):
- cgroup v1 (hybrid): kubelet 1.36 refuses v1 unless ``failCgroupV1: false``; no
  systemd, so the cgroupfs driver.
- swap may be on: ``failSwapOn: false``.
- no registry: the pause image is local (containerd.py) and images are imported,
  never pulled; image GC is held off so an imported image is never deleted.
- small shared disks: eviction thresholds low enough not to evict rollouts.
"""

from __future__ import annotations

import json
from pathlib import Path

from swerollout.kube import kubeconfig_document, write_kubeconfig

from .config import ClusterConfig, ClusterPaths
from .pki import CertPair, NodePki


def component_kubeconfig(path: Path, server_url: str, ca_cert: Path, pair: CertPair, user: str) -> Path:
    document = kubeconfig_document(
        server_url,
        ca_cert.read_bytes(),
        user=user,
        client_cert_pem=pair.cert.read_bytes(),
        client_key_pem=pair.key.read_bytes(),
    )
    return write_kubeconfig(path, document)


def kubelet_config(config: ClusterConfig, paths: ClusterPaths, pki: NodePki, port: int, healthz_port: int) -> str:
    document = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": config.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki.kubelet_serving.cert),
        "tlsPrivateKeyFile": str(pki.kubelet_serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDomain": config.cluster_domain,
        "clusterDNS": [config.dns_service_ip],
        # Pods never see the host's resolvers (which are off this machine).
        "resolvConf": str(paths.configs / "resolv.conf"),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "maxPods": 110,
        "staticPodPath": "",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }
    return json.dumps(document, indent=2)


def kube_proxy_config(config: ClusterConfig, kubeconfig: Path, healthz_port: int, metrics_port: int) -> str:
    document = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": config.node_name,
        "mode": "iptables",
        "clusterCIDR": config.pod_range,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # Leave the host's conntrack table size and timeouts alone (a VM may refuse, and
        # they are machine-wide).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        # NodePorts only on the node IP: never on the host's outward addresses, and not on
        # loopback (which would need route_localnet).
        "nodePortAddresses": [f"{config.node_ip}/32"],
    }
    return json.dumps(document, indent=2)
