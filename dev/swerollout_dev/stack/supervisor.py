"""The dev supervisor: a daemon that owns every process of one dev environment.

`swerollout dev up` starts it detached (its own session) and waits until the
state file says ready. It starts, in order: etcd + kube-apiserver, the chart's
CRDs and RBAC (helm), the policy server (with --policy), the node agent and the
operator (under the chart's ServiceAccount, with a TokenRequest token). It
restarts kube-apiserver and etcd (same port, certificates and data), the node
agent and the operator if they die, and on SIGTERM stops
everything in reverse order, kills every pod process and removes its state file.
An exclusive lock on ``supervisor.lock`` makes a second supervisor for the same
directory refuse to start.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO

from swerollout.kube import NODES, SECRETS, NotFound
from swerollout_dev.controlplane import ControlPlane, ControlPlaneError, free_port
from swerollout_dev.nodeagent.agent import TAINT_EFFECT, TAINT_KEY, reap_all
from swerollout_dev.nodeagent.process import start_ticks

from .crashloop import MAX_IN_A_ROW, CrashLoop
from .paths import DevPaths
from .state import ComponentState, DevState

RELEASE = "swerollout"
RELEASE_NAMESPACE = "swerollout-system"
OPERATOR_SERVICE_ACCOUNT = "swerollout-operator"
DEV_RUNNER_IMAGE = "swerollout:dev"
EXIT_ALREADY_RUNNING = 3
_RESTARTABLE = ("node-agent", "operator")


# SGLang's own default port: examples/dev-rollout.yaml can name the endpoint when it is free.
DEFAULT_POLICY_PORT = 30000
# The Secret (namespace default) that holds the policy server's admin key, as
# examples/dev-rollout.yaml's spec.inference.adminKeySecretRef names it.
INFERENCE_KEYS_SECRET = "swerollout-inference-keys"
INFERENCE_ADMIN_KEY = "admin-key"
INFERENCE_API_KEY = "api-key"
INFERENCE_KEYS_NAMESPACE = "default"


def _port_or_free(preferred: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            return free_port()
    return preferred


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


class Child:
    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> ComponentState:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out, open(os.devnull, "rb") as devnull:
            self.popen = subprocess.Popen(self.argv, stdin=devnull, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        return ComponentState(
            status="running", pid=self.popen.pid, start_ticks=start_ticks(self.popen.pid), log=str(self.log)
        )

    def stop(self, grace: float) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    return inodes


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself holds the listening socket on ``port``."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return False
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in wanted:
                return True
        except OSError:
            continue
    return False


def _wait_port(port: int, child: Child, timeout: float) -> bool:
    # A port that answers is not enough: another stack on this machine may hold it (two
    # `dev up`s at once race for the default port), and this child then exits on its bind.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen is None or child.popen.poll() is not None:
            return False
        if _listens(child.popen.pid, port):
            return True
        time.sleep(0.2)
    return False


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.paths = DevPaths(Path(args.dev_dir))
        self.stop_requested = threading.Event()
        self.children: dict[str, Child] = {}
        self.plane: ControlPlane | None = None
        self.crashes: dict[str, CrashLoop] = {}
        """Per restartable component (and etcd, kube-apiserver): its deaths in a row."""
        self.ingest_port = 0
        self.state = DevState(
            supervisor=ComponentState(status="running", pid=os.getpid(), start_ticks=start_ticks(os.getpid())),
            kubeconfig=str(self.paths.kubeconfig),
            sglang_url=args.sglang_url or "",
        )

    def save(self) -> None:
        self.state.write(self.paths.state)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested.set()

    # ---- start-up ---------------------------------------------------------------------

    def start(self) -> None:
        self.save()
        self.plane = ControlPlane(self.paths.controlplane)
        self.plane.start()
        # After ControlPlane.start(): our handler replaces its stop-and-die one, so the
        # shutdown below can stop the operator and node agent while the API still answers.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        for name, pid in self.plane.pids().items():
            self.state.components[name] = ComponentState(status="running", pid=pid, start_ticks=start_ticks(pid))
        self.state.components["kube-apiserver"].detail = self.plane.server_url
        self.state.server_url = self.plane.server_url
        shutil.copyfile(self.plane.kubeconfig_path, self.paths.kubeconfig)
        os.chmod(self.paths.kubeconfig, 0o600)
        self.save()
        self._install_chart()
        if self.args.policy:
            self._start_policy_server()
        self.ingest_port = free_port()  # chosen before the node agent, which lets pods reach it and nothing else
        self._start_node_agent()
        self._start_operator()
        self.state.status = "ready"
        self.save()

    def _install_chart(self) -> None:
        assert self.plane is not None
        chart = repo_root() / "helm" / "swerollout"
        comp = ComponentState(status="starting")
        self.state.components["chart"] = comp
        if (chart / "Chart.yaml").is_file():
            result = self.plane.helm(
                "upgrade",
                "--install",
                RELEASE,
                str(chart),
                "--namespace",
                RELEASE_NAMESPACE,
                "--create-namespace",
                "--set",
                "rbac.clusterWide=true",
                "--set",
                f"serviceAccount.name={OPERATOR_SERVICE_ACCOUNT}",
            )
            if result.returncode == 0:
                comp.status, comp.detail = "running", f"helm release {RELEASE} in namespace {RELEASE_NAMESPACE}"
                self.save()
                return
            comp.detail = f"helm install failed, applied crds/ instead: {result.stderr.strip()[-500:]}"
        else:
            comp.detail = "no chart at helm/swerollout; applied crds/ (no RBAC)"
        applied = self.plane.kubectl("apply", "-f", str(repo_root() / "crds"))
        comp.status = "failed" if applied.returncode != 0 else "skipped"
        if applied.returncode != 0:
            comp.detail += f"; kubectl apply failed: {applied.stderr.strip()[-300:]}"
        self.save()

    def _start_policy_server(self) -> None:
        """The stand-in: --engines of them (policy-server, policy-server-2, ...), all with
        the same weights and admin key, and with --gateway the real smg in front of them."""
        # Served as real SGLang is in production: its admin routes (aborts, pauses, weight
        # updates) need the admin key, which rollouts get from a Secret (the env, not argv,
        # carries it to the server).
        admin_key = self._inference_admin_key()
        env = {**os.environ, "SGLANG_ADMIN_API_KEY": admin_key}
        tasks = str(self._tasks_file())
        started: list[tuple[Child, int]] = []
        for index in range(self.args.engines):
            name = "policy-server" if index == 0 else f"policy-server-{index + 1}"
            port = _port_or_free(DEFAULT_POLICY_PORT) if index == 0 else free_port()
            argv = [sys.executable, "-m", "swerollout.cli.main", "policy-server", "--policy", self.args.policy]
            argv += ["--port", str(port), "--tasks", tasks]
            child = Child(name, argv, self.paths.logs / f"{name}.log", env=env)
            self.children[child.name] = child
            self.state.components[child.name] = child.start()
            started.append((child, port))
        self.save()
        for i, (child, port) in enumerate(started):
            if not _wait_port(port, child, timeout=180) and port == DEFAULT_POLICY_PORT:
                # taken between the check and the bind: any free port serves as well
                child.stop(grace=5)
                port = free_port()
                child.argv[child.argv.index("--port") + 1] = str(port)
                self.state.components[child.name] = child.start()
                started[i] = (child, port)
                self.save()
            comp = self.state.components[child.name]
            if not _wait_port(port, child, timeout=180):
                comp.status, comp.detail = "failed", f"did not listen on port {port}; see {child.log}"
                self.save()
                raise RuntimeError(f"the policy server {comp.detail}")
            comp.detail = f"http://127.0.0.1:{port} (admin key in {self.paths.inference_admin_key})"
            self.state.engine_urls.append(f"http://127.0.0.1:{port}")
        self.state.sglang_url = self.state.engine_urls[0]
        if self.args.gateway:
            self._start_gateway(admin_key)
        self._store_inference_keys(admin_key)
        self.save()

    def _start_gateway(self, admin_key: str) -> None:
        """smg in front of the engines (docs/sglang-protocol.md, "Fleets"). Its --api-key is
        the engines' admin key: smg sends it to them (it does not pass a caller's key on) and
        requires it of every caller, so rollouts name it as their API key too."""
        from swerollout_dev.gateway import KEY_ENV, GatewayError, gateway_command, wait_ready

        port = free_port()
        argv = gateway_command(
            self.state.engine_urls, port=port, metrics_port=free_port(), policy="consistent_hashing", enable_rl=True
        )
        child = Child("gateway", argv, self.paths.logs / "gateway.log", env={**os.environ, KEY_ENV: admin_key})
        self.children[child.name] = child
        comp = self.state.components[child.name] = child.start()
        self.save()
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, len(self.state.engine_urls), 90, api_key=admin_key, process=child.popen, log_file=child.log)
        except GatewayError as exc:
            comp.status, comp.detail = "failed", str(exc)
            self.save()
            raise RuntimeError(f"the gateway: {exc}") from exc
        comp.detail = f"{url} (smg, {len(self.state.engine_urls)} engines; its API key is the admin key)"
        self.state.sglang_url = url

    def _inference_admin_key(self) -> str:
        path = self.paths.inference_admin_key
        if not path.exists():
            path.write_text(secrets.token_hex(24))
            os.chmod(path, 0o600)
        return path.read_text().strip()

    def _store_inference_keys(self, admin_key: str) -> None:
        """The Secret a rollout's spec.inference.adminKeySecretRef names; the kubelet (here the
        node agent) mounts it into the runner container, the operator never reads it."""
        assert self.plane is not None
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": INFERENCE_KEYS_SECRET, "namespace": INFERENCE_KEYS_NAMESPACE},
            "type": "Opaque",
            "stringData": {INFERENCE_ADMIN_KEY: admin_key},
        }
        if self.args.gateway:
            # The gateway requires its key of every caller, /generate too (spec.inference.apiKeySecretRef).
            body["stringData"] = {INFERENCE_ADMIN_KEY: admin_key, INFERENCE_API_KEY: admin_key}
        with self.plane.admin_client() as kube:
            kube.apply(SECRETS, body, INFERENCE_KEYS_NAMESPACE, field_manager="swerollout-dev")
        self.state.inference_admin_key_secret = f"{INFERENCE_KEYS_SECRET}/{INFERENCE_ADMIN_KEY}"
        if self.args.gateway:
            self.state.inference_api_key_secret = f"{INFERENCE_KEYS_SECRET}/{INFERENCE_API_KEY}"

    def _tasks_file(self) -> Path:
        """--tasks, or the bundled tasks written as git repositories (file:// images) under the dev dir."""
        if self.args.tasks:
            return Path(self.args.tasks).resolve()
        from swerollout_dev.tasks import INDEX_FILE, materialize_tasks

        dest = self.paths.root / "tasks"
        if not (dest / INDEX_FILE).is_file():
            materialize_tasks(dest)
        self.state.components["tasks"] = ComponentState(status="ready", detail=f"bundled tasks in {dest / INDEX_FILE}")
        return dest / INDEX_FILE

    def _start_node_agent(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "swerollout_dev.nodeagent",
            "--kubeconfig",
            str(self.paths.kubeconfig),
            "--root",
            str(self.paths.node),
            "--hide",
            str(self.paths.root),
            "--stop-pods-on-exit",
        ]
        for address in self._pod_egress():
            argv += ["--egress", address]
        child = Child("node-agent", argv, self.paths.logs / "node-agent.log")
        self.children[child.name] = child
        log_offset = child.log.stat().st_size if child.log.exists() else 0
        comp = child.start()
        self.state.components[child.name] = comp
        comp.detail = f"node local, pods in {self.paths.node}"
        self.save()
        if not self._wait_node_ready(child, log_offset, timeout=60):
            comp.status = "failed"
            comp.detail = f"Node 'local' did not become Ready; see {child.log}"
            raise RuntimeError(comp.detail)

    def _pod_egress(self) -> list[str]:
        """What a rollout pod's runner may reach on the host: the ingest API and the policy server."""
        out = [f"127.0.0.1:{self.ingest_port}"]
        if self.state.sglang_url:
            url = urllib.parse.urlsplit(self.state.sglang_url)
            if url.hostname:
                out.append(f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}")
        return out

    def _wait_node_ready(self, child: Child, log_offset: int, timeout: float) -> bool:
        """Node 'local' is Ready and this agent announced it serves (the Node may still be
        Ready from an earlier run kept in etcd)."""
        assert self.plane is not None
        deadline = time.monotonic() + timeout
        with self.plane.admin_client() as kube:
            while time.monotonic() < deadline and child.popen is not None and child.popen.poll() is None:
                with open(child.log, "rb") as log:
                    log.seek(log_offset)
                    serving = b"node agent serving" in log.read()
                if not serving:
                    time.sleep(0.2)
                    continue
                try:
                    conditions = kube.get(NODES, "local").get("status", {}).get("conditions", [])
                    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                        return True
                except NotFound:
                    pass
                time.sleep(0.2)
        return False

    def _start_operator(self) -> None:
        assert self.plane is not None
        if self.args.no_operator:
            self.state.components["operator"] = ComponentState(status="skipped", detail="--no-operator")
            return
        if importlib.util.find_spec("swerollout_operator") is None:
            self.state.components["operator"] = ComponentState(
                status="skipped", detail="swerollout_operator is not installed"
            )
            return
        chart_ok = self.state.components["chart"].status == "running"
        if chart_ok:
            token = self.plane.mint_token(
                RELEASE_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, expiration=86400, create_serviceaccount=False
            )
            kubeconfig = self.plane.write_kubeconfig_for_token(self.paths.operator_kubeconfig, token, RELEASE_NAMESPACE)
            identity = f"ServiceAccount {RELEASE_NAMESPACE}/{OPERATOR_SERVICE_ACCOUNT}"
        else:
            kubeconfig, identity = self.paths.kubeconfig, "cluster admin (the chart is not installed)"
        key = self.paths.root / "token.key"
        if not key.exists():
            # Text, not raw bytes: the operator strips whitespace from its key file (a key made
            # with `echo` ends in a newline), so a random key that began or ended in a
            # whitespace byte came out short and the operator refused to start (1 start in 20).
            key.write_bytes(secrets.token_hex(32).encode())
            os.chmod(key, 0o600)
        ingest = self.ingest_port
        metrics = free_port()
        toleration = {"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT}
        store = self.paths.store
        store.mkdir(exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "swerollout_operator",
            "--cluster-wide",
            "--kubeconfig",
            str(kubeconfig),
            "--runner-image",
            DEV_RUNNER_IMAGE,
            "--runner-image-pull-policy",
            "Never",
            "--ingest-url",
            f"http://127.0.0.1:{ingest}",
            "--ingest-port",
            str(ingest),
            "--metrics-port",
            str(metrics),
            "--bind-host",
            "127.0.0.1",
            "--token-key-file",
            str(key),
            "--extra-tolerations",
            json.dumps([toleration]),
            "--store-url",
            f"file://{store}",
        ]
        child = Child("operator", argv, self.paths.logs / "operator.log")
        self.children[child.name] = child
        comp = child.start()
        comp.detail = f"as {identity}; ingest http://127.0.0.1:{ingest}"
        self.state.components[child.name] = comp
        self.state.operator_metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        self.save()

    # ---- running and stopping -----------------------------------------------------------

    def watch(self) -> None:
        while not self.stop_requested.wait(0.5):
            self._revive_control_plane()
            for name, child in self.children.items():
                comp = self.state.components[name]
                if child.popen is None or comp.status != "running" or child.popen.poll() is None:
                    continue
                code = child.popen.returncode
                crashes = self.crashes.setdefault(name, CrashLoop())
                if name in _RESTARTABLE and crashes.died():
                    restarts = comp.restarts + 1
                    detail = comp.detail
                    time.sleep(crashes.pause())
                    comp = child.start()
                    crashes.restarted()
                    comp.restarts, comp.detail = restarts, detail
                    self.state.components[name] = comp
                else:
                    in_a_row = f" ({crashes.in_a_row + 1} times in a row)" if name in _RESTARTABLE else ""
                    comp.status, comp.detail = "exited", f"exit code {code}{in_a_row}; see {child.log}"
                self.save()

    def _revive_control_plane(self) -> None:
        """A dead kube-apiserver (or etcd) is started again on the same port, certificates
        and etcd data, like a static pod under a kubelet: clients reconnect, watches relist."""
        if self.plane is None:
            return
        for name in self.plane.exited():
            comp = self.state.components[name]
            crashes = self.crashes.setdefault(name, CrashLoop())
            if comp.status == "exited":
                continue
            if not crashes.died():
                comp.status, comp.detail = (
                    "exited",
                    f"died {MAX_IN_A_ROW + 1} times in a row; see {self.plane.workdir / 'logs'}",
                )
                self.save()
                continue
            print(f"dev supervisor: {name} (pid {comp.pid}) exited; restarting it", file=sys.stderr, flush=True)
            crashes.restarted()  # a start that fails counts as one that died at once
            try:
                pid = self.plane.restart(name)
            except ControlPlaneError as exc:
                print(f"dev supervisor: restarting {name} failed: {exc}", file=sys.stderr, flush=True)
                comp.restarts += 1
                self.save()
                continue
            self.state.components[name] = ComponentState(
                status="running",
                pid=pid,
                start_ticks=start_ticks(pid),
                detail=comp.detail,
                restarts=comp.restarts + 1,
            )
            self.save()

    def shutdown(self) -> None:
        self.state.status = "stopping"
        self.save()
        engines = [n for n in self.children if n.startswith("policy-server")]
        for name in ("operator", "node-agent", "gateway", *engines):
            child = self.children.get(name)
            if child is not None:
                child.stop(grace=30 if name == "node-agent" else 10)
        reap_all(self.paths.node)
        if self.plane is not None:
            self.plane.stop()
        self.paths.state.unlink(missing_ok=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m swerollout_dev.stack.supervisor")
    p.add_argument("--dev-dir", required=True)
    p.add_argument("--sglang-url")
    p.add_argument("--policy", choices=["oracle", "null", "tiny-lm"])
    p.add_argument("--tasks")
    p.add_argument("--engines", type=int, default=1)
    p.add_argument("--gateway", choices=["smg"])
    p.add_argument("--no-operator", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    paths = DevPaths(Path(args.dev_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    lock: IO[str] = open(paths.lock, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another dev supervisor owns {paths.root}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    supervisor = Supervisor(args)
    try:
        supervisor.start()
        supervisor.watch()
        return 0
    except Exception as exc:
        supervisor.state.status, supervisor.state.message = "failed", f"{type(exc).__name__}: {exc}"
        supervisor.save()
        print(f"dev supervisor failed: {exc}", file=sys.stderr)
        return 1
    finally:
        failed = supervisor.state.status == "failed"
        message = supervisor.state.message
        supervisor.shutdown()
        if failed:  # leave the reason for `dev up`, which is waiting for it
            supervisor.state.status, supervisor.state.message = "failed", message
            supervisor.save()
        lock.close()


if __name__ == "__main__":
    sys.exit(main())
