"""Start a real swerex-remote on a free loopback port, for tests of any area.

    handle = start_swerex(workdir)      # blocks until the server answers
    ... Sandbox.connect(handle.url, handle.token) ...
    handle.stop()                       # kills the server and every shell it spawned

The server runs in its own process group with `workdir` as its cwd, so the bash
sessions it spawns start there and `stop()` reaches all of them.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SWEREX_REMOTE = Path(sys.executable).parent / "swerex-remote"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SwerexHandle:
    url: str
    token: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        """Kill the server's whole process group and reap it. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        # Shells spawned by the server share its group; make sure none outlive it.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_swerex(workdir: str | Path, *, port: int | None = None, startup_timeout: float = 30.0) -> SwerexHandle:
    """Start swerex-remote serving `workdir` on 127.0.0.1 with a random auth token."""
    workdir = Path(workdir)
    port = port or free_port()
    token = secrets.token_hex(16)
    log_path = workdir.parent / f"swerex-{port}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [str(SWEREX_REMOTE), "--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    handle = SwerexHandle(url=f"http://127.0.0.1:{port}", token=token, port=port, process=process, log_path=log_path)
    deadline = time.monotonic() + startup_timeout
    while True:
        if process.poll() is not None:
            handle.stop()
            raise RuntimeError(f"swerex-remote exited with {process.returncode}:\n{handle.log()}")
        try:
            request = urllib.request.Request(f"{handle.url}/is_alive", headers={"X-API-Key": token})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return handle
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            handle.stop()
            raise RuntimeError(f"swerex-remote did not answer within {startup_timeout}s:\n{handle.log()}")
        time.sleep(0.1)
