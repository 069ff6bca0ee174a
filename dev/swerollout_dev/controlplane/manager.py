"""A real etcd + kube-apiserver on free loopback ports, for tests and `swerollout dev up`.

    with ControlPlane(tmp_path) as cp:
        kube = cp.admin_client()            # cluster admin (O=system:masters)
        token = cp.mint_token("ns", "sa")    # a real ServiceAccount token
        cp.write_kubeconfig_for_token(tmp_path / "sa.kubeconfig", token)

What runs: etcd (``--unsafe-no-fsync`` by default: data survives a process crash,
not a machine crash) and kube-apiserver with x509 client auth, RBAC authorization,
ServiceAccount token signing (TokenRequest/TokenReview work) and
``--allow-privileged``.

What does NOT run: kubelet, scheduler, controller-manager. Consequences:
- nothing schedules pods (the local node agent binds them itself);
- nothing garbage-collects ownerReferences (delete children yourself, or assert the
  references);
- a deleted namespace stays ``Terminating`` forever (delete the objects inside it);
- no ServiceAccount named ``default`` appears in new namespaces, so the
  ServiceAccount admission plugin is disabled (it would reject every pod whose
  ServiceAccount does not exist); pods get no token volume injected.

Cleanup: :meth:`stop` SIGTERMs then SIGKILLs each process group. A running control
plane is also stopped at interpreter exit and on SIGTERM/SIGHUP; the kernel kills it
when its owner dies abruptly (``die_with_owner``, main thread only); and whatever is
still left is reaped by the next start in the same workdir (pidfile).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from swerollout.kube import (
    AlreadyExists,
    AsyncKubeClient,
    KubeClient,
    NotFound,
    kubeconfig_document,
    load_kubeconfig,
    write_kubeconfig,
)
from swerollout.kube.resources import NAMESPACES, SERVICEACCOUNTS
from swerollout_dev.binaries import Binaries, find_binaries
from swerollout_dev.controlplane.certs import Pki, ensure_pki
from swerollout_dev.controlplane.processes import PidFile, PidFileStore, ProcessRecord, spawn, terminate_group

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def etcd_data_dir(workdir: Path) -> Path:
    return workdir / "etcd-data"


def discard_data(workdir: Path) -> bool:
    """Remove the etcd data a control plane in ``workdir`` kept; True when there was some."""
    data = etcd_data_dir(workdir)
    existed = data.exists()
    shutil.rmtree(data, ignore_errors=True)
    return existed


class ControlPlaneError(RuntimeError):
    """Root error of the control-plane manager."""

    retryable = False


class StartupFailed(ControlPlaneError):
    """etcd or kube-apiserver exited or never became ready; the message holds its log tail."""

    retryable = True  # usually a port taken between our probe and the bind


class WorkdirBusy(ControlPlaneError):
    """Another live process runs a control plane in this workdir; stop it or use another dir."""


class ControlPlaneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    service_cluster_ip_range: str = "10.0.0.0/24"
    """CIDR that Service clusterIPs come from."""
    service_account_issuer: str = DEFAULT_ISSUER
    """``iss`` claim of ServiceAccount tokens."""
    api_audiences: list[str] = Field(default_factory=lambda: [DEFAULT_ISSUER])
    """Audiences a token must carry to authenticate (TokenRequest defaults to these)."""
    etcd_unsafe_no_fsync: bool = True
    """Skip fsync in etcd: much faster; data is lost only if the machine crashes."""
    startup_timeout_seconds: float = 90.0
    """How long etcd + apiserver may take to become ready (2 busy cores: be generous)."""
    stop_grace_seconds: float = 5.0
    """SIGTERM grace per process before SIGKILL."""
    die_with_owner: bool = True
    """Ask the kernel to SIGKILL etcd and kube-apiserver when the owning process
    dies (even by SIGKILL). Applies only when start() runs on the main thread: the
    signal follows the thread that spawned them. Off = only stop()/atexit/signal
    handlers and the pidfile reaping on the next start protect against orphans."""
    start_attempts: int = 3
    """Fresh ports are probed before each attempt; another process may grab one in between."""
    disabled_admission_plugins: list[str] = ["ServiceAccount"]
    """Admission plugins to turn off. Without a controller-manager no ``default``
    ServiceAccount appears, so ServiceAccount admission would reject every pod; a
    full cluster (``swerollout cluster up``) runs one and passes ``[]``."""
    endpoint_reconciler_type: str = "none"
    """``none``: the ``kubernetes`` Service gets no endpoints (they would be loopback,
    which the Endpoints validation rejects). A cluster advertising a non-loopback
    address uses ``lease`` so pods reach the API server through the Service."""
    extra_apiserver_args: list[str] = []
    extra_etcd_args: list[str] = []


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- process-wide cleanup of every running control plane -------------------------

_running: set[ControlPlane] = set()
_running_lock = threading.Lock()
_hooks_installed = False


def _stop_all() -> None:
    with _running_lock:
        planes = list(_running)
    for plane in planes:
        try:
            plane.stop()
        except Exception:  # noqa: BLE001 - at exit, stop the rest regardless
            pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _stop_all()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    # Re-deliver with the original disposition so the process dies as it would have.
    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_previous_handlers: dict[int, Any] = {}


def _install_cleanup_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:
            continue
        _previous_handlers[signum] = current
        signal.signal(signum, _on_signal)


class _Child:
    def __init__(
        self, name: str, args: list[str], popen: subprocess.Popen[bytes], log_path: Path, log: IO[bytes]
    ) -> None:
        self.name = name
        self.args = args
        """The command line: a restart runs exactly this again (same ports, certs and data)."""
        self.popen = popen
        self.log_path = log_path
        self.log = log

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ControlPlane:
    """etcd + kube-apiserver rooted in ``workdir`` (PKI, data, logs, kubeconfig, pidfile)."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        config: ControlPlaneConfig | None = None,
        binaries: Binaries | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.config = config or ControlPlaneConfig()
        self._binaries = binaries
        self._children: list[_Child] = []
        self._pidfile = PidFileStore(self.workdir)
        self._lock = threading.RLock()
        self.etcd_url = ""
        self.server_url = ""
        """``https://127.0.0.1:<port>`` once started."""
        self.kubeconfig_path = self.workdir / "admin.kubeconfig"
        """Admin kubeconfig (cluster superuser), written by :meth:`start`."""
        self.pki = Pki(dir=self.workdir / "pki")
        self.startup_seconds = 0.0
        """Wall time the last :meth:`start` took (for reporting)."""

    # --- lifecycle -----------------------------------------------------------------

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = find_binaries()
        return self._binaries

    @property
    def running(self) -> bool:
        return bool(self._children) and all(c.popen.poll() is None for c in self._children)

    def pids(self) -> dict[str, int]:
        """name -> pid of each child process (etcd, kube-apiserver)."""
        return {c.name: c.popen.pid for c in self._children}

    def start(self) -> ControlPlane:
        with self._lock:
            if self._children:
                raise ControlPlaneError(f"control plane in {self.workdir} is already started")
            began = time.monotonic()
            binaries = self.binaries
            self.workdir.mkdir(parents=True, exist_ok=True)
            with _running_lock:
                if any(p.workdir == self.workdir and p is not self for p in _running):
                    raise WorkdirBusy(f"another ControlPlane in this process already runs in {self.workdir}")
            owner = self._pidfile.owner_alive_elsewhere()
            if owner is not None:
                raise WorkdirBusy(
                    f"process {owner} runs a control plane in {self.workdir}; stop it or use another workdir"
                )
            self._pidfile.reap_orphans(self.config.stop_grace_seconds)
            pki = ensure_pki(self.workdir / "pki")
            _install_cleanup_hooks()
            with _running_lock:
                _running.add(self)
            last_error: StartupFailed | None = None
            for _ in range(max(1, self.config.start_attempts)):
                try:
                    self._start_processes(binaries, pki)
                    break
                except StartupFailed as exc:
                    last_error = exc
                    self._stop_children()
                except BaseException:
                    self.stop()
                    raise
            else:
                self.stop()
                assert last_error is not None
                raise last_error
            try:
                self._write_admin_kubeconfig(pki)
                self._ensure_default_namespace()
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - began
            return self

    def stop(self, *, delete_data: bool = False) -> None:
        """Stop the apiserver, then etcd; idempotent. Leaves no process behind.

        ``delete_data`` also removes etcd's data dir (over 60 MB of preallocated WAL
        even when nearly empty); PKI, logs and kubeconfig stay for debugging.
        """
        with self._lock:
            self._stop_children()
            self._pidfile.remove()
            with _running_lock:
                _running.discard(self)
            if delete_data:
                discard_data(self.workdir)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _stop_children(self) -> None:
        for child in reversed(self._children):
            terminate_group(child.popen.pid, child.popen, self.config.stop_grace_seconds)
            child.log.close()
        self._children.clear()

    def _spawn(self, name: str, args: list[str]) -> _Child:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        log_path = logs / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in _stop_children
        die_with_owner = self.config.die_with_owner and threading.current_thread() is threading.main_thread()
        child = _Child(name, args, spawn(args, log, die_with_parent=die_with_owner), log_path, log)
        self._children.append(child)
        self._write_pidfile()
        return child

    def _write_pidfile(self) -> None:
        self._pidfile.write(
            PidFile(
                owner_pid=os.getpid(),
                processes=[ProcessRecord(name=c.name, pid=c.popen.pid) for c in self._children],
            )
        )

    def exited(self) -> list[str]:
        """Names of the children (etcd, kube-apiserver) that are no longer running."""
        with self._lock:
            return [c.name for c in self._children if c.popen.poll() is not None]

    def restart(self, name: str) -> int:
        """Start child ``name`` again with its exact command line: the same port, certificates
        and etcd data, so every kubeconfig and client keeps working; returns its new pid once
        it is ready. A child still running is stopped first. What a supervisor calls when
        the API server (or etcd) died."""
        with self._lock:
            index = next((i for i, c in enumerate(self._children) if c.name == name), None)
            if index is None:
                raise ControlPlaneError(f"no child {name!r} in the control plane in {self.workdir}")
            old = self._children[index]
            terminate_group(old.popen.pid, old.popen, self.config.stop_grace_seconds)
            old.log.close()
            log = open(old.log_path, "ab")  # noqa: SIM115 - closed in _stop_children
            die_with_owner = self.config.die_with_owner and threading.current_thread() is threading.main_thread()
            child = _Child(name, old.args, spawn(old.args, log, die_with_parent=die_with_owner), old.log_path, log)
            self._children[index] = child
            self._write_pidfile()
            deadline = time.monotonic() + self.config.startup_timeout_seconds
            if name == "etcd":
                self._wait_ready(
                    child, f"{self.etcd_url}/health", None, deadline, lambda body: '"health":"true"' in body
                )
            else:
                self._wait_ready(
                    child, f"{self.server_url}/readyz", self.pki, deadline, lambda body: body.strip() == "ok"
                )
            return child.popen.pid

    def _start_processes(self, binaries: Binaries, pki: Pki) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_seconds
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd_args = [
            str(binaries.etcd),
            f"--name={self._etcd_member_name}",
            f"--data-dir={etcd_data_dir(self.workdir)}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={self._etcd_member_name}={peer_url}",
            "--log-level=warn",
        ]
        if self.config.etcd_unsafe_no_fsync:
            etcd_args.append("--unsafe-no-fsync")
        etcd = self._spawn("etcd", etcd_args + self.config.extra_etcd_args)
        self._wait_ready(etcd, f"{self.etcd_url}/health", None, deadline, lambda body: '"health":"true"' in body)
        self._check_etcd_is_ours(etcd)

        self.server_url = f"https://127.0.0.1:{api_port}"
        api_args = [
            str(binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.config.service_account_issuer}",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_private_key}",
            f"--api-audiences={','.join(self.config.api_audiences)}",
            f"--service-cluster-ip-range={self.config.service_cluster_ip_range}",
            "--allow-privileged=true",
            f"--endpoint-reconciler-type={self.config.endpoint_reconciler_type}",
            "--profiling=false",
        ]
        if self.config.disabled_admission_plugins:
            api_args.append(f"--disable-admission-plugins={','.join(self.config.disabled_admission_plugins)}")
        api = self._spawn("kube-apiserver", api_args + self.config.extra_apiserver_args)
        self._wait_ready(api, f"{self.server_url}/readyz", pki, deadline, lambda body: body.strip() == "ok")

    @property
    def _etcd_member_name(self) -> str:
        # Unique per workdir and stable across restarts (etcd keeps the bootstrap name).
        return "swerollout-" + hashlib.sha256(str(self.workdir).encode()).hexdigest()[:12]

    def _check_etcd_is_ours(self, etcd: _Child) -> None:
        """Another engineer's etcd may have grabbed the probed port first and answered our
        health check; the member name tells them apart."""
        try:
            members = httpx.post(f"{self.etcd_url}/v3/cluster/member/list", json={}, timeout=5).json()
        except (httpx.HTTPError, ValueError) as exc:
            raise StartupFailed(f"etcd at {self.etcd_url} did not list its members: {exc}") from exc
        names = [m.get("name") for m in members.get("members") or []]
        if self._etcd_member_name not in names:
            raise StartupFailed(
                f"the etcd answering at {self.etcd_url} is not ours (members {names}); log {etcd.log_path}:\n"
                f"{etcd.log_tail()}"
            )

    def _wait_ready(self, child: _Child, url: str, pki: Pki | None, deadline: float, ok: Callable[[str], bool]) -> None:
        verify: ssl.SSLContext | bool = False
        if pki is not None:
            ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
            ctx.load_cert_chain(pki.admin_cert, pki.admin_key)
            verify = ctx
        last = ""
        with httpx.Client(verify=verify, timeout=5.0) as http:
            while True:
                code = child.popen.poll()
                if code is not None:
                    raise StartupFailed(
                        f"{child.name} exited with code {code} during startup; log {child.log_path}:\n"
                        f"{child.log_tail()}"
                    )
                try:
                    resp = http.get(url)
                    if resp.status_code == 200 and ok(resp.text):
                        return
                    last = f"{resp.status_code} {resp.text[-1500:]}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() > deadline:
                    raise StartupFailed(
                        f"{child.name} not ready at {url} after {self.config.startup_timeout_seconds}s "
                        f"(last answer: {last}); log {child.log_path}:\n{child.log_tail()}"
                    )
                time.sleep(0.1)

    def _write_admin_kubeconfig(self, pki: Pki) -> None:
        document = kubeconfig_document(
            self.server_url,
            pki.ca_cert.read_bytes(),
            user="admin",
            client_cert_pem=pki.admin_cert.read_bytes(),
            client_key_pem=pki.admin_key.read_bytes(),
        )
        write_kubeconfig(self.kubeconfig_path, document)

    def _ensure_default_namespace(self) -> None:
        with self.admin_client() as kube:
            try:
                kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
            except AlreadyExists:
                pass

    # --- clients and credentials ---------------------------------------------------

    def _require_started(self) -> None:
        if not self.server_url or not self._children:
            raise ControlPlaneError(f"control plane in {self.workdir} is not started; call start() first")

    def admin_client(self) -> KubeClient:
        """A sync client with cluster-admin rights; close it (or use ``with``)."""
        self._require_started()
        return KubeClient(load_kubeconfig(self.kubeconfig_path))

    def admin_async_client(self) -> AsyncKubeClient:
        """An asyncio client with cluster-admin rights; ``await client.aclose()`` when done."""
        self._require_started()
        return AsyncKubeClient(load_kubeconfig(self.kubeconfig_path))

    def mint_token(
        self,
        namespace: str,
        serviceaccount: str,
        audiences: list[str] | None = None,
        expiration: int = 3600,
        *,
        create_serviceaccount: bool = True,
    ) -> str:
        """A ServiceAccount token from the TokenRequest API.

        ``expiration`` is in seconds (the API server raises anything below 600 to
        600). The ServiceAccount (and its namespace) is created when missing unless
        ``create_serviceaccount=False``.
        """
        with self.admin_client() as kube:
            if create_serviceaccount:
                for rt, kind, name, ns in (
                    (NAMESPACES, "Namespace", namespace, None),
                    (SERVICEACCOUNTS, "ServiceAccount", serviceaccount, namespace),
                ):
                    try:
                        kube.create(rt, {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}, ns)
                    except AlreadyExists:
                        pass
            try:
                result = kube.request_token(
                    namespace, serviceaccount, audiences=audiences, expiration_seconds=expiration
                )
            except NotFound as exc:
                raise ControlPlaneError(
                    f"ServiceAccount {namespace}/{serviceaccount} does not exist; create it first"
                ) from exc
        return result.token

    def write_kubeconfig_for_token(self, path: str | os.PathLike[str], token: str, namespace: str = "default") -> Path:
        """A kubeconfig that authenticates with ``token`` against this control plane."""
        self._require_started()
        document = kubeconfig_document(
            self.server_url, self.pki.ca_cert.read_bytes(), user="token-user", token=token, namespace=namespace
        )
        return write_kubeconfig(path, document)

    # --- the CLI tools, pointed at this control plane -------------------------------

    def env(self) -> dict[str, str]:
        """Environment for kubectl/helm/operator children: the admin ``KUBECONFIG`` and a
        discovery cache of this control plane's own (``KUBECACHEDIR``).

        The default cache, ~/.kube/cache, is keyed by host:port: a later control plane
        on a recycled port would read this one's discovery and miss its CRDs.
        """
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig_path), KUBECACHEDIR=str(self.workdir / "kube-cache"))

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane (admin unless ``kubeconfig``)."""
        config = str(kubeconfig or self.kubeconfig_path)
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={config}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.env(),
        )

    def helm(
        self, *args: str, kubeconfig: str | os.PathLike[str] | None = None, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the real helm against this control plane, with helm state under the workdir."""
        helm_home = self.workdir / "helm"
        env = dict(
            self.env(),
            HELM_CACHE_HOME=str(helm_home / "cache"),
            HELM_CONFIG_HOME=str(helm_home / "config"),
            HELM_DATA_HOME=str(helm_home / "data"),
        )
        config = str(kubeconfig or self.kubeconfig_path)
        return subprocess.run(
            [str(self.binaries.helm), f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
