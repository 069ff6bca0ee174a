"""Network namespaces of pods: one per pod (the runner's), one per task-image container.

A pod namespace holds loopback only, plus what the pod's portal (portal.py) puts
there: listeners at the host addresses the node lets pods reach (the operator's
ingest API, the policy server) and at the pod IP for each port a sandbox container
declares. A sandbox (task image) container gets a namespace of its own with
loopback alone, so model-written code reaches nothing but itself; the runner reaches
it through the declared ports. Namespaces are named (``ip netns``), so they outlive
a node agent restart as the pods do, and are deleted with the pod.

Creating namespaces needs root; without it (or without ``ip``/``nsenter``) pods share
the host network and their status says so.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


def pod_netns(uid: str) -> str:
    return "swr-" + hashlib.sha256(uid.encode()).hexdigest()[:12]


def container_netns(uid: str, container: str) -> str:
    return "swr-" + hashlib.sha256(f"{uid}/{container}".encode()).hexdigest()[:12]


def path_of(name: str) -> Path:
    return NETNS_DIR / name


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")


def create(name: str, extra_addresses: tuple[str, ...] = ()) -> Path:
    """A named namespace with loopback up (and ``extra_addresses`` on it); reused if it exists."""
    if not path_of(name).exists():
        _ip("netns", "add", name)
    _ip("-n", name, "link", "set", "lo", "up")
    for address in extra_addresses:
        if not address.startswith("127."):
            result = subprocess.run(
                ["ip", "-n", name, "addr", "replace", f"{address}/32", "dev", "lo"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if result.returncode != 0:
                raise OSError(f"address {address} in {name}: {result.stderr.strip()}")
    return path_of(name)


def delete(name: str) -> None:
    if path_of(name).exists():
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30, check=False)


def unavailable() -> str | None:
    """None when this process can give pods their own network namespaces, else why not."""
    if os.geteuid() != 0:
        return "the node agent does not run as root"
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (hack/install-system-deps.sh installs it)"
    probe = f"swr-probe-{os.getpid()}"
    try:
        create(probe)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        delete(probe)
    return None


def enter_prefix(name: str) -> list[str]:
    """Run a command inside the namespace."""
    return ["nsenter", f"--net={path_of(name)}", "--"]


def setns(path: Path) -> None:
    """Move the calling thread into the namespace at ``path`` (a socket made afterwards lives there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)
