"""The pods' cgroups: the kubelet (cgroupfs driver) creates /kubepods in every
hierarchy; `cluster down` kills what is left in them and removes them."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
POD_CGROUP = "kubepods"


def pod_cgroup_dirs() -> list[Path]:
    """Every cgroup dir at or below /kubepods in every hierarchy (v1 and v2), deepest first."""
    dirs: list[Path] = []
    if not CGROUP_FS.is_dir():
        return dirs
    roots = [CGROUP_FS / POD_CGROUP]
    roots += [h / POD_CGROUP for h in CGROUP_FS.iterdir() if h.is_dir() and not h.is_symlink()]
    for root in roots:
        if root.is_dir():
            dirs += [Path(d) for d, _, _ in os.walk(root)]
    return sorted(set(dirs), key=lambda p: len(p.parts), reverse=True)


def pids_in(dirs: list[Path]) -> set[int]:
    found: set[int] = set()
    for d in dirs:
        try:
            found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            continue
    return found


def kill_and_remove(timeout: float = 30.0) -> list[str]:
    """SIGKILL every process in the pod cgroups, then remove the cgroups; returns problems."""
    deadline = time.monotonic() + timeout
    while True:
        dirs = pod_cgroup_dirs()
        pids = pids_in(dirs)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    problems = []
    for d in pod_cgroup_dirs():
        try:
            d.rmdir()
        except OSError as exc:
            problems.append(f"cgroup {d}: {exc}")
    return problems
