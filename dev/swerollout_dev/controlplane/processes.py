"""Child processes that never outlive their owner unnoticed.

Three layers: the owner stops its children (stop(), atexit, SIGTERM/SIGHUP); the
kernel SIGKILLs them if the owner's main thread dies anyway (PR_SET_PDEATHSIG);
and a pidfile lets the next start in the same workdir reap what is left.

Each child runs in its own session (so its process group is its pid, and a Ctrl-C
at the terminal reaches only Python, which then stops the children in order). The
pids go to a pidfile in the workdir; if the owning Python process dies without
cleaning up (SIGKILL, OOM), the next start in the same workdir reads the pidfile and
reaps the orphans. A pid is trusted only if its command line still mentions the
workdir, so a recycled pid is never killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict

PIDFILE_NAME = "controlplane.pids.json"


class ProcessRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    pid: int
    """Also its process-group id: every child starts a new session."""


class PidFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    owner_pid: int
    """The Python process that started the children."""
    processes: list[ProcessRecord] = []


def is_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may hold spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def cmdline_mentions(pid: int, text: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return text.encode() in raw


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def terminate_group(pid: int, popen: subprocess.Popen[bytes] | None, grace_seconds: float) -> None:
    """SIGTERM the process group, then SIGKILL it after ``grace_seconds``; reap our child."""
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            os.kill(pid, sig)
        if popen is not None:
            try:
                popen.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        elif wait_gone(pid, wait):
            break
    if popen is not None and popen.poll() is None:
        popen.wait(timeout=5)


_PR_SET_PDEATHSIG = 1
_prctl: Any = None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: only a preloaded libc call, nothing
    # that could take a lock another parent thread held at fork time.
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def spawn(
    args: list[str], log: IO[bytes], env: dict[str, str] | None = None, *, die_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``args`` in its own session, output to ``log``.

    ``die_with_parent``: the kernel SIGKILLs the child when the *thread* that
    started it exits, so even a SIGKILLed owner leaves nothing behind. Only safe
    from a thread that lives as long as the child (the main thread); Linux only.
    """
    global _prctl
    preexec = None
    if die_with_parent and sys.platform == "linux":
        if _prctl is None:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        preexec = _die_with_parent
    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        preexec_fn=preexec,
    )


class PidFileStore:
    """Reads and writes the pidfile of one workdir."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.path = workdir / PIDFILE_NAME

    def read(self) -> PidFile | None:
        try:
            return PidFile.model_validate_json(self.path.read_text())
        except (OSError, ValueError):
            return None

    def write(self, content: PidFile) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(content.model_dump_json())
        os.replace(tmp, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def live_children(self) -> list[ProcessRecord]:
        """Recorded children still running (checked against the workdir, not just the pid)."""
        content = self.read()
        if content is None:
            return []
        return [r for r in content.processes if is_alive(r.pid) and cmdline_mentions(r.pid, str(self.workdir))]

    def owner_alive_elsewhere(self) -> int | None:
        """The pid of another live process whose control plane still runs in this workdir."""
        content = self.read()
        if content is None or content.owner_pid == os.getpid() or not is_alive(content.owner_pid):
            return None
        return content.owner_pid if self.live_children() else None

    def reap_orphans(self, grace_seconds: float = 3.0) -> list[int]:
        """Kill the children a dead owner left behind; returns the pids it killed."""
        content = self.read()
        if content is None:
            return []
        killed = []
        # Reverse start order: the apiserver before its etcd.
        for record in reversed(self.live_children()):
            terminate_group(record.pid, None, grace_seconds)
            killed.append(record.pid)
        self.remove()
        return killed
