"""The real kube-controller-manager (built with the node binaries) with only some of its
controllers on, beside the dev stack, which runs none: what a test needs of a cluster's
controllers (quota counting, garbage collection) comes from the real thing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swerollout_dev.cluster.nodebins import find_node_binaries
from swerollout_dev.controlplane.manager import free_port


@contextmanager
def controller_manager(kubeconfig: Path, workdir: Path, controllers: str) -> Iterator[subprocess.Popen[bytes]]:
    """kube-controller-manager with only ``controllers`` on, as the dev stack's admin."""
    binary = find_node_binaries(build_if_missing=False).kube_controller_manager
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "kube-controller-manager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--controllers={controllers}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={workdir / 'certs'}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
