"""One container process: start it, recognise it again after a restart, stop it.

Every container runs under a tiny ``sh`` shim (the role containerd's shim
plays): it waits for the command and writes its exit code to a file, so a
restarted node agent that is no longer the parent can still learn how an
adopted container ended. A process is identified by pid *and* its start time
(``/proc/<pid>/stat`` field 22), so a recycled pid is never mistaken for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

# $0 is the exit-code file; the trap keeps the shim alive through SIGTERM so it can
# record how the command ended (the command itself gets the default disposition).
_SHIM = 'trap : TERM INT HUP; "$@"; rc=$?; echo $rc > "$0.tmp" && mv "$0.tmp" "$0"; exit $rc'


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, tail = raw.rpartition(")")
    comm = head.partition("(")[2]
    # fields[0] = state (field 3 of stat), so field N is fields[N - 3].
    return [comm, *tail.split()]


def start_ticks(pid: int) -> int | None:
    f = _stat_fields(pid)
    if f is None or f[1] == "Z":
        return None
    return int(f[20])


def _process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, session id, comm) for every live process."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f is None or f[1] == "Z":
            continue
        table[int(entry.name)] = (int(f[2]), int(f[4]), f[0])
    return table


def process_tree(pid: int) -> dict[int, str]:
    """The process, its descendants and members of its session: pid -> comm."""
    table = _process_table()
    found: dict[int, str] = {}
    if pid in table:
        found[pid] = table[pid][2]
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, _, comm) in table.items():
            if ppid == parent and child not in found:
                found[child] = comm
                frontier.append(child)
    for other, (_, sid, comm) in table.items():
        if sid == pid and other not in found:
            found[other] = comm
    return found


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its descendants and its session (no grace)."""
    _signal(list(process_tree(pid)), signal.SIGKILL)


@dataclass
class ProcessRecord:
    """What is written next to a running container to adopt it later."""

    pid: int
    start_ticks: int
    exit_file: str

    def dump(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ProcessRecord | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


class ContainerProcess:
    def __init__(
        self, record: ProcessRecord, popen: subprocess.Popen[bytes] | None = None, *, own_pid_namespace: bool = False
    ) -> None:
        self.record = record
        self._popen = popen
        self.killed = False
        # In its own pid namespace (bubblewrap) the kernel kills what the command leaves
        # behind; otherwise the session is swept after it ends.
        self.own_pid_namespace = own_pid_namespace

    @property
    def pid(self) -> int:
        return self.record.pid

    @classmethod
    def spawn(
        cls,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        exit_file: Path,
        own_pid_namespace: bool = False,
    ) -> ContainerProcess:
        exit_file.unlink(missing_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _SHIM, str(exit_file), *argv],
                env=env,
                cwd=cwd,
                stdin=devnull,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        ticks = start_ticks(popen.pid) or 0
        return cls(ProcessRecord(popen.pid, ticks, str(exit_file)), popen, own_pid_namespace=own_pid_namespace)

    @classmethod
    def adopt(cls, record: ProcessRecord) -> ContainerProcess:
        return cls(record)

    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return start_ticks(self.record.pid) == self.record.start_ticks

    def exit_code(self) -> int:
        """How the container ended (call once it is not alive)."""
        try:
            return int(Path(self.record.exit_file).read_text().strip())
        except (OSError, ValueError):
            pass
        if self._popen is not None and self._popen.returncode is not None:
            rc = self._popen.returncode
            return 128 - rc if rc < 0 else rc
        # An adopted shim that died without writing: it was killed outright.
        return 137

    async def wait(self) -> int:
        """Wait for the container to end without polling (pidfd), then reap it."""
        if self.alive():
            try:
                fd = os.pidfd_open(self.record.pid)
            except ProcessLookupError:
                fd = -1
            if fd >= 0:
                try:
                    if self.alive():
                        loop = asyncio.get_running_loop()
                        done: asyncio.Future[None] = loop.create_future()

                        def readable() -> None:
                            if not done.done():
                                done.set_result(None)

                        loop.add_reader(fd, readable)
                        try:
                            await done
                        finally:
                            loop.remove_reader(fd)
                finally:
                    os.close(fd)
        if self._popen is not None:
            self._popen.wait()
        if self.own_pid_namespace:
            return self.exit_code()
        # Whatever the command left behind in its session dies with it, as in a container.
        leftovers = [
            p for p, (_, sid, _) in _process_table().items() if sid == self.record.pid and p != self.record.pid
        ]
        _signal(leftovers, signal.SIGKILL)
        return self.exit_code()

    async def terminate(self, grace_seconds: float) -> None:
        """SIGTERM to the container's own processes, SIGKILL to everything after the grace period.

        The bwrap wrappers are skipped for SIGTERM: they would die at once and take
        the sandboxed command down with SIGKILL before it could shut down cleanly.
        """
        if not self.alive():
            return
        tree = process_tree(self.record.pid)
        _signal([p for p, comm in tree.items() if comm != "bwrap"], signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.wait()), timeout=max(grace_seconds, 0.0))
            return
        except TimeoutError:
            pass
        self.killed = True
        _signal(list(process_tree(self.record.pid)), signal.SIGKILL)
        await self.wait()
