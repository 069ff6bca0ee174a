"""Memory limits of containers, as a kubelet enforces them: a memory cgroup per container
whose limit is the container's ``resources.limits.memory``; past it the kernel's OOM
killer ends the container, and the agent reports it ``OOMKilled`` (exit code 137), as
a kubelet does.

Both cgroup hierarchies are handled: v2 (``memory.max``, ``memory.events``) and v1
(``memory.limit_in_bytes``, ``memory.oom_control``). The per-container groups live under
the agent's own memory cgroup, in ``swerollout-pods/``. Where that cannot be written (an
unprivileged agent, no memory controller), limits are not enforced and the agent says so
once; nothing else changes.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i?|e[0-9]+|m)?$")
_UNITS = {
    "": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
OOM_POLL_SECONDS = 0.5
"""How often a limited container's OOM count is read."""
JOIN = 'echo $$ > "$0" && exec "$@"'
"""A shell that moves itself into a cgroup (its procs file is $0), then becomes the container."""


def memory_bytes(quantity: str) -> int:
    """A Kubernetes quantity (``4Gi``, ``512M``, ``1e9``) in bytes."""
    found = _QUANTITY.match(quantity.strip())
    if not found:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number, unit = found.group(1), found.group(2) or ""
    if unit.startswith("e"):
        return int(float(number) * 10 ** int(unit[1:]))
    if unit == "m":
        return int(float(number) / 1000)
    return int(float(number) * _UNITS[unit])


@dataclass(frozen=True)
class _Layout:
    base: Path
    v2: bool


def _own_memory_cgroup(root: Path) -> _Layout | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and (root / "memory").is_dir():
            return _Layout(root / "memory" / path.lstrip("/"), v2=False)
    unified = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if unified is not None and (root / "cgroup.controllers").is_file():
        base = root / unified.lstrip("/")
        if "memory" in (base / "cgroup.controllers").read_text().split():
            return _Layout(base, v2=True)
    return None


class MemoryLimits:
    """Creates, reads and removes the per-container memory cgroups of one node agent."""

    def __init__(self, root: Path = CGROUP_ROOT) -> None:
        layout = _own_memory_cgroup(root)
        self._layout: _Layout | None = None
        self._warned = False
        if layout is None:
            return
        pods = layout.base / "swerollout-pods"
        try:
            pods.mkdir(exist_ok=True)
            # Left by an agent that ran as root before: there, but not ours to write.
            if not os.access(pods, os.W_OK | os.X_OK):
                raise PermissionError(f"{pods} is not writable by uid {os.getuid()}")
            if layout.v2:
                # Children get the memory controller only when their parent delegates it.
                (layout.base / "cgroup.subtree_control").write_text("+memory")
                (pods / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            log.warning("container memory limits are not enforced: cannot use %s (%s)", pods, exc)
            return
        self._layout = _Layout(pods, layout.v2)

    @property
    def enforced(self) -> bool:
        return self._layout is not None

    def create(self, name: str, limit: str) -> Path | None:
        """A cgroup limited to ``limit`` for one container; its procs file, or None when
        limits are not enforced here (said once)."""
        if self._layout is None:
            if not self._warned:
                log.warning("memory limits are not enforced on this node (no writable memory cgroup)")
                self._warned = True
            return None
        group = self._layout.base / name
        self.remove(name)
        group.mkdir()
        limit_file = "memory.max" if self._layout.v2 else "memory.limit_in_bytes"
        (group / limit_file).write_text(str(memory_bytes(limit)))
        if self._layout.v2 and (group / "memory.oom.group").exists():
            (group / "memory.oom.group").write_text("1")
        # No swap beyond the limit either (a kubelet runs without swap).
        swap = group / ("memory.swap.max" if self._layout.v2 else "memory.memsw.limit_in_bytes")
        if swap.exists():
            swap.write_text("0" if self._layout.v2 else str(memory_bytes(limit)))
        return group / "cgroup.procs"

    def procs_file(self, name: str) -> Path | None:
        """The procs file of a container's cgroup, if it has one (tests join it)."""
        if self._layout is None:
            return None
        procs = self._layout.base / name / "cgroup.procs"
        return procs if procs.exists() else None

    def oom_killed(self, name: str) -> bool:
        """Whether the kernel's OOM killer ended a process of the container's cgroup."""
        if self._layout is None:
            return False
        group = self._layout.base / name
        events = group / ("memory.events" if self._layout.v2 else "memory.oom_control")
        try:
            for line in events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            return False
        return False

    def remove(self, name: str) -> None:
        """Remove the container's cgroup (once its processes are gone)."""
        if self._layout is None:
            return
        group = self._layout.base / name
        if group.is_dir():
            try:
                group.rmdir()  # empty once its processes are gone (the kernel's files go with it)
            except OSError as exc:
                log.warning("memory cgroup %s not removed: %s", group, exc)


@functools.cache
def memory_limits() -> MemoryLimits:
    """The node agent's one MemoryLimits (made on first use)."""
    return MemoryLimits()
