"""The cluster supervisor: a daemon that owns every process of the cluster.

`swerollout cluster up` starts it detached and waits for the state file to say
ready. In order it: takes the machine-wide lock, clears what an earlier cluster
may have left, sets up the host network (network.py), starts etcd and
kube-apiserver (the dev control plane, with the Node authorizer, NodeRestriction
and ServiceAccount admission on), containerd with the local pause image,
kube-controller-manager, kube-scheduler, the kubelet and kube-proxy, and waits
for the Node to be Ready. On SIGTERM it stops them in reverse order and runs the
teardown, so nothing of the cluster stays behind.

Every child gets PR_SET_PDEATHSIG: if the supervisor is killed outright the
kernel kills them, and the next `cluster up` or `cluster down` clears the rest.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

from swerollout.kube import NODES, SERVICES, KubeClient, NotFound
from swerollout_dev.binaries import find_binaries
from swerollout_dev.controlplane import ControlPlane, ControlPlaneConfig, free_port
from swerollout_dev.controlplane.certs import ensure_pki
from swerollout_dev.controlplane.processes import spawn, terminate_group
from swerollout_dev.nodeagent.process import start_ticks
from swerollout_dev.stack.state import ComponentState

from . import containerd, network, teardown
from .buildimage import IMAGE
from .components import component_kubeconfig, kube_proxy_config, kubelet_config
from .config import ClusterConfig, ClusterPaths
from .dns import DnsServer
from .nodebins import NodeBinaries, find_node_binaries
from .pki import APISERVER_KUBELET_CLIENT, NodePki, issue_node_pki
from .state import ClusterState

log = logging.getLogger("swerollout.cluster")
NODE_READY_TIMEOUT = 240.0
RELEASE = "swerollout"
RELEASE_NAMESPACE = "swerollout-system"
OPERATOR_UID = 10001  # the image's user (Dockerfile); the data volume must be writable by it
POLICY_PORT = 30000  # SGLang's default port, on the node IP


def chart_install_args() -> list[str]:
    """`helm` arguments that install (or restore) the operator's release as `cluster up` does:
    our image by name, never pulled; every namespace watched (tests use their own)."""
    repository, tag = IMAGE.rsplit(":", 1)
    return [
        "upgrade",
        "--install",
        RELEASE,
        str(repo_root() / "helm" / "swerollout"),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=IfNotPresent",
        "--set",
        "rbac.clusterWide=true",
    ]


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


class ClusterStartFailed(RuntimeError):
    pass


class Supervisor:
    def __init__(self, paths: ClusterPaths, config: ClusterConfig, args: argparse.Namespace | None = None) -> None:
        self.paths, self.config = paths, config
        self.args = args or argparse.Namespace(operator_image=None, policy=None, tasks=None, load_image=[])
        self.stop_requested = threading.Event()
        self.plane: ControlPlane | None = None
        self.children: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}
        me = os.getpid()
        self.state = ClusterState(
            supervisor=ComponentState(status="running", pid=me, start_ticks=start_ticks(me)),
            kubeconfig=str(paths.kubeconfig),
            node_name=config.node_name,
            node_ip=config.node_ip,
        )
        self._lock_file: IO[str] | None = None
        self.dns: DnsServer | None = None
        self._dns_client: KubeClient | None = None

    def save(self) -> None:
        self.state.write(self.paths.state)

    # ---- the machine-wide lock ---------------------------------------------------------

    def lock(self) -> None:
        self.paths.runtime.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.paths.lock, "a+")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            owner = self._lock_file.read().strip()
            raise ClusterStartFailed(
                f"another cluster runs on this machine ({owner or 'unknown owner'}); "
                "only one can, since the kubelet and kube-proxy program the host's iptables. "
                "Stop it with `swerollout cluster down --workdir <its dir>`"
            ) from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(f"supervisor pid {os.getpid()}, cluster dir {self.paths.root}\n")
        self._lock_file.flush()

    # ---- start-up ----------------------------------------------------------------------

    def start(self) -> None:
        self.save()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        leftovers = teardown.clean_node(self.config, self.paths)
        if leftovers:
            log.warning("an earlier cluster left things that could not be removed: %s", leftovers)
        if teardown.forget_control_plane(self.paths):
            log.warning("an earlier cluster in %s did not stop cleanly; its etcd data was removed", self.paths.root)
        find_binaries()  # the control plane's binaries: fail here, before the node is touched
        node_bins = find_node_binaries()
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        network.set_up(self.config, 0, self.paths.saved_sysctls)

        ca = ensure_pki(self.paths.pki)
        pki = issue_node_pki(ca, self.paths.node_pki, self.config)
        self._start_control_plane(pki)
        assert self.plane is not None
        api_port = int(self.plane.server_url.rsplit(":", 1)[1])
        network.set_up(self.config, api_port, self.paths.saved_sysctls)  # now the guard knows the port
        shutil.copyfile(self.plane.kubeconfig_path, self.paths.kubeconfig)
        os.chmod(self.paths.kubeconfig, 0o600)
        self.state.server_url = self.plane.server_url
        self._grant_apiserver_kubelet_access()
        self._start_dns()
        self.save()

        self._start_containerd(node_bins)
        server = self.plane.server_url
        kubeconfigs = self.paths.configs
        cm_kc = component_kubeconfig(
            kubeconfigs / "controller-manager.kubeconfig",
            server,
            pki.ca_cert,
            pki.controller_manager,
            "system:kube-controller-manager",
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(node_bins.kube_controller_manager),
                f"--kubeconfig={cm_kc}",
                f"--authentication-kubeconfig={cm_kc}",
                f"--authorization-kubeconfig={cm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-account-private-key-file={ca.sa_private_key}",
                "--cluster-name=swerollout",
                f"--cluster-cidr={self.config.pod_range}",
                f"--service-cluster-ip-range={self.config.service_range}",
            ],
        )
        sched_kc = component_kubeconfig(
            kubeconfigs / "scheduler.kubeconfig", server, pki.ca_cert, pki.scheduler, "system:kube-scheduler"
        )
        self._spawn(
            "kube-scheduler",
            [
                str(node_bins.kube_scheduler),
                f"--kubeconfig={sched_kc}",
                f"--authentication-kubeconfig={sched_kc}",
                f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )
        self._start_kubelet(node_bins, pki, server)
        proxy_kc = component_kubeconfig(
            kubeconfigs / "kube-proxy.kubeconfig", server, pki.ca_cert, pki.kube_proxy, "system:kube-proxy"
        )
        proxy_conf = kubeconfigs / "kube-proxy.json"
        proxy_conf.write_text(kube_proxy_config(self.config, proxy_kc, free_port(), free_port()))
        self._spawn("kube-proxy", [str(node_bins.kube_proxy), f"--config={proxy_conf}"])
        self._wait_node_ready()
        for archive in self.args.load_image:
            containerd.import_image(self.paths, Path(archive))
        if self.args.policy:
            self._start_policy_server()
        if self.args.operator_image:
            self._install_operator(Path(self.args.operator_image))
        self.state.status = "ready"
        self.state.message = f"node {self.config.node_name} Ready"
        self.save()

    def _start_control_plane(self, pki: NodePki) -> None:
        cfg = ControlPlaneConfig(
            service_cluster_ip_range=self.config.service_range,
            disabled_admission_plugins=[],
            endpoint_reconciler_type="lease",
            extra_apiserver_args=[
                # Bound to every address so pods reach it on the node IP; the guard chain
                # (network.py) drops what comes from outside this machine. Later flags win.
                "--bind-address=0.0.0.0",
                f"--advertise-address={self.config.node_ip}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                "--authorization-mode=Node",  # appended: RBAC,Node
                "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                # Dial the kubelet at the node IP (the node name resolves nowhere).
                "--kubelet-preferred-address-types=InternalIP",
            ],
        )
        self.plane = ControlPlane(self.paths.controlplane, cfg)
        self.plane.start()
        # ControlPlane.start() installs its own SIGTERM handler; ours must win so the
        # node is stopped before the API server.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        for name, pid in self.plane.pids().items():
            self.state.components[name] = ComponentState(status="running", pid=pid, start_ticks=start_ticks(pid))

    def _start_dns(self) -> None:
        assert self.plane is not None
        client = self._dns_client = self.plane.admin_client()

        def cluster_ip(namespace: str, name: str) -> str | None:
            try:
                ip = client.get(SERVICES, name, namespace).get("spec", {}).get("clusterIP")
            except NotFound:
                return None
            return ip if ip and ip != "None" else None

        self.dns = DnsServer(self.config.node_ip, 53, self.config.cluster_domain, cluster_ip).start()
        self.state.components["dns"] = ComponentState(
            status="running",
            pid=os.getpid(),
            start_ticks=start_ticks(os.getpid()),
            detail=f"{self.config.node_ip}:53 (in the supervisor)",
        )

    def _grant_apiserver_kubelet_access(self) -> None:
        assert self.plane is not None
        binding = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: swerollout:apiserver-kubelet-api-admin
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {APISERVER_KUBELET_CLIENT}
"""
        result = self.plane.kubectl("apply", "-f", "-", input=binding)
        if result.returncode != 0:
            raise ClusterStartFailed(f"could not let the API server reach the kubelet: {result.stderr.strip()}")

    def _start_containerd(self, node_bins: NodeBinaries) -> None:
        toml = containerd.write_configs(self.config, self.paths)
        self.paths.containerd_state.mkdir(parents=True, exist_ok=True)
        popen = self._spawn("containerd", ["containerd", f"--config={toml}"])
        containerd.wait_socket(self.paths, lambda: popen.poll() is None, timeout=60)
        archive = containerd.pause_image_archive(node_bins.pause, self.paths.configs / "pause-image.tar")
        containerd.import_image(self.paths, archive)

    def _start_kubelet(self, node_bins: NodeBinaries, pki: NodePki, server: str) -> None:
        conf_dir = self.paths.configs
        (conf_dir / "resolv.conf").write_text(f"nameserver {self.config.dns_service_ip}\n")
        kc = component_kubeconfig(
            conf_dir / "kubelet.kubeconfig",
            server,
            pki.ca_cert,
            pki.kubelet_client,
            f"system:node:{self.config.node_name}",
        )
        port, healthz = free_port(), free_port()
        conf = conf_dir / "kubelet.json"
        conf.write_text(kubelet_config(self.config, self.paths, pki, port, healthz))
        self.paths.kubelet_root.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "kubelet",
            [
                str(node_bins.kubelet),
                f"--config={conf}",
                f"--kubeconfig={kc}",
                f"--node-ip={self.config.node_ip}",
                f"--hostname-override={self.config.node_name}",
                f"--root-dir={self.paths.kubelet_root}",
                "--v=1",
            ],
        )
        self.state.components["kubelet"].detail = f"https://{self.config.node_ip}:{port}"

    def _start_policy_server(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "swerollout.cli.main",
            "policy-server",
            "--policy",
            self.args.policy,
            "--host",
            self.config.node_ip,
            "--port",
            str(POLICY_PORT),
        ]
        if self.args.tasks:
            argv += ["--tasks", self.args.tasks]
        popen = self._spawn("policy-server", argv)
        url = f"http://{self.config.node_ip}:{POLICY_PORT}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                raise ClusterStartFailed(f"the policy server exited; see {self.paths.logs}/policy-server.log")
            try:
                with socket.create_connection((self.config.node_ip, POLICY_PORT), timeout=1):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise ClusterStartFailed(f"the policy server did not listen on {url}")
        self.state.components["policy-server"].detail = url
        self.save()

    def _install_operator(self, archive: Path) -> None:
        """The chart, as a user installs it, with the operator image built from our Dockerfile."""
        assert self.plane is not None
        containerd.import_image(self.paths, archive)
        # No storage provisioner runs here: a hostPath volume pre-bound to the chart's claim.
        data = self.paths.root / "volumes" / "operator-data"
        data.mkdir(parents=True, exist_ok=True)
        os.chown(data, OPERATOR_UID, OPERATOR_UID)
        volume = f"""apiVersion: v1
kind: PersistentVolume
metadata:
  name: {RELEASE}-data
spec:
  capacity: {{storage: 20Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {{namespace: {RELEASE_NAMESPACE}, name: {RELEASE}-data}}
  hostPath: {{path: "{data}", type: Directory}}
"""
        applied = self.plane.kubectl("apply", "-f", "-", input=volume)
        if applied.returncode != 0:
            raise ClusterStartFailed(f"could not create the operator's volume: {applied.stderr.strip()}")
        started = time.monotonic()
        installed = self.plane.helm(*chart_install_args(), "--wait", "--timeout", "6m", timeout=420)
        if installed.returncode != 0:
            pods = self.plane.kubectl("get", "pods", "-n", RELEASE_NAMESPACE, "-o", "wide").stdout
            raise ClusterStartFailed(f"helm install failed: {installed.stderr.strip()[-1500:]}\n{pods}")
        self.state.components["operator"] = ComponentState(
            status="ready",
            detail=f"Deployment {RELEASE_NAMESPACE}/{RELEASE} from {IMAGE} "
            f"(Ready in {time.monotonic() - started:.0f}s)",
        )
        self.save()

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log_path = self.paths.logs / f"{name}.log"
        out = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        popen = spawn(argv, out, die_with_parent=True)
        self.children[name] = (popen, out)
        self.state.components[name] = ComponentState(
            status="running",
            pid=popen.pid,
            start_ticks=start_ticks(popen.pid),
            log=str(log_path),
        )
        self.save()
        return popen

    def _wait_node_ready(self) -> None:
        assert self.plane is not None
        deadline = time.monotonic() + NODE_READY_TIMEOUT
        last = "not registered"
        with self.plane.admin_client() as kube:
            while time.monotonic() < deadline:
                self._check_children()
                try:
                    node = kube.get(NODES, self.config.node_name)
                    conditions = {c["type"]: c for c in node.get("status", {}).get("conditions") or []}
                    ready = conditions.get("Ready", {})
                    if ready.get("status") == "True":
                        return
                    last = f"Ready={ready.get('status')} ({ready.get('message', '')})"
                except NotFound:
                    pass
                time.sleep(0.5)
        raise ClusterStartFailed(
            f"node {self.config.node_name} not Ready after {NODE_READY_TIMEOUT:.0f}s: {last}; "
            f"see {self.paths.logs}/kubelet.log"
        )

    def _check_children(self) -> None:
        for name, (popen, _) in self.children.items():
            code = popen.poll()
            if code is not None:
                tail = (self.paths.logs / f"{name}.log").read_text(errors="replace")[-2000:]
                raise ClusterStartFailed(f"{name} exited with code {code}; log tail:\n{tail}")

    # ---- running and stopping ----------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested.set()

    def run(self) -> None:
        while not self.stop_requested.wait(1.0):
            for name, (popen, _) in self.children.items():
                comp = self.state.components[name]
                if popen.poll() is not None and comp.status == "running":
                    comp.status, comp.detail = "exited", f"exit code {popen.returncode}"
                    self.state.message = f"{name} exited (code {popen.returncode}); see {comp.log}"
                    self.save()

    def stop(self) -> None:
        self.state.status = "stopping"
        self.save()
        for name in teardown.STOP_ORDER:
            if name in self.children:
                popen, out = self.children.pop(name)
                terminate_group(popen.pid, popen, grace_seconds=10.0)
                out.close()
                if name == "containerd":
                    # The containers and shims outlive containerd by design; end them now,
                    # before the control plane goes.
                    teardown.clean_node(self.config, self.paths)
        if self.dns is not None:
            self.dns.close()
        if self._dns_client is not None:
            self._dns_client.close()
        if self.plane is not None:
            self.plane.stop(delete_data=True)
        problems = teardown.clean_node(self.config, self.paths)
        if problems:
            log.error("left behind: %s", problems)
        self.paths.state.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swerollout_dev.cluster.supervisor")
    parser.add_argument("--cluster-dir", required=True)
    parser.add_argument("--operator-image", help="image archive to load and install the chart with")
    parser.add_argument("--policy", choices=["oracle", "null", "tiny-lm"], help="start the bundled policy server")
    parser.add_argument("--tasks", help="JSONL of tasks for the policy server (oracle)")
    parser.add_argument("--load-image", action="append", default=[], help="image archive to load (repeatable)")
    args = parser.parse_args(argv)
    paths = ClusterPaths(root=Path(args.cluster_dir).resolve())
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        handlers=[logging.StreamHandler(sys.stderr)],
    )
    sup = Supervisor(paths, ClusterConfig(), args)
    try:
        sup.lock()
    except ClusterStartFailed as exc:
        # Someone else's cluster: report, and touch nothing of it.
        sup.state.status, sup.state.message = "failed", str(exc)
        sup.save()
        return 1
    try:
        sup.start()
    except BaseException as exc:  # noqa: BLE001 - report any failure in the state file, then clean up
        log.exception("cluster start failed")
        sup.state.status = "failed"
        sup.state.message = str(exc)[-3000:]
        sup.save()
        failed_state = sup.state.model_copy()
        sup.stop()
        failed_state.write(paths.state)  # keep the reason for `cluster up` to print
        return 1
    sup.run()
    sup.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
