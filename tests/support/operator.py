"""Fixtures and handles for the operator, installed with the chart and running under the chart's ServiceAccount.

The operator never runs as admin in these tests: the token comes from the
TokenRequest API for the ServiceAccount the chart creates, so every test here
also proves that the chart's RBAC is enough.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from swerollout.kube import SECRETS, KubeClient
from swerollout_dev.controlplane import ControlPlane
from tests.support.cluster import ROOT, checked, install_crd


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    install_crd(control_plane)


@pytest.fixture
def kubectl(control_plane: ControlPlane, crd: None) -> Callable[..., Any]:
    return checked(control_plane.kubectl)


READY_TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OperatorProcess:
    """One operator process; `kill()` is a SIGKILL, `start()` starts a fresh one."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    metrics_url: str
    release: str
    kubeconfig: Path
    ingest_url: str = ""
    key_file: Path | None = None
    store_dir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _logs: list[Any] = field(default_factory=list)

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self._logs.append(log)
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.starts += 1
        # Generous: make test runs three pytest processes and an image build side by side on
        # two cores, and the operator's imports alone took over 60 s there once.
        deadline = time.monotonic() + READY_TIMEOUT
        try:
            while True:
                assert self.proc.poll() is None, f"operator exited early:\n{self.log_tail()}"
                try:
                    if httpx.get(f"{self.metrics_url}/readyz", timeout=1).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, (
                    f"operator not ready after {READY_TIMEOUT:.0f} s:\n{self.log_tail()}"
                )
                time.sleep(0.2)
        except BaseException:
            # A fixture whose setup fails gets no teardown: never leave this process running.
            self.kill()
            for log in self._logs:
                log.close()
            raise

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        for log in self._logs:
            log.close()

    def metrics(self) -> str:
        return httpx.get(f"{self.metrics_url}/metrics", timeout=5).text

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def install_chart(control_plane: ControlPlane, namespace: str, release: str, *extra: str) -> None:
    result = control_plane.helm(
        "install", release, str(ROOT / "helm" / "swerollout"), "-n", namespace, "--wait=false", *extra
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def operator(control_plane: ControlPlane, crd: None, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    release = f"swerollout-{secrets.token_hex(3)}"
    install_chart(control_plane, namespace, release)
    token = control_plane.mint_token(namespace, release, create_serviceaccount=False)
    # For kubectl as the operator (tests of its RBAC); the operator itself reads the
    # ServiceAccount volume the Deployment gets, as in a pod.
    kubeconfig = control_plane.write_kubeconfig_for_token(tmp_path / "operator.kubeconfig", token, namespace)
    identity = tmp_path / "serviceaccount"
    identity.mkdir()
    (identity / "token").write_text(token)
    (identity / "ca.crt").write_bytes(control_plane.pki.ca_cert.read_bytes())
    (identity / "namespace").write_text(namespace)
    # The key the chart generated, as the Deployment would mount it.
    with KubeClient.from_kubeconfig(control_plane.kubeconfig_path) as admin:
        secret = admin.get(SECRETS, f"{release}-token-key", namespace)
    key_file = tmp_path / "token-key"
    key_file.write_bytes(base64.b64decode(secret["data"]["key"]))
    port = _free_port()
    ingest_port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "swerollout_operator",
        "--service-account-dir",
        str(identity),
        "--namespaces",
        namespace,
        "--bind-host",
        "127.0.0.1",
        "--metrics-port",
        str(port),
        "--ingest-port",
        str(ingest_port),
        "--token-key-file",
        str(key_file),
        "--store-url",
        f"file://{tmp_path / 'store'}",
        "--log-level",
        "DEBUG",
    ]
    host, api_port = control_plane.server_url.removeprefix("https://").rsplit(":", 1)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=api_port)
    handle = OperatorProcess(
        argv,
        env,
        tmp_path / "operator.log",
        f"http://127.0.0.1:{port}",
        release,
        kubeconfig,
        ingest_url=f"http://127.0.0.1:{ingest_port}",
        key_file=key_file,
        store_dir=tmp_path / "store",
    )
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()
