"""The node agent's memory limits (swerollout_dev.nodeagent.memlimit) on this machine's
kernel: a process in a container's cgroup that allocates past the limit is OOM-killed,
and the agent can tell."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from swerollout_dev.nodeagent.memlimit import JOIN, MemoryLimits, memory_bytes


def test_quantities_are_read_as_kubernetes_writes_them() -> None:
    assert memory_bytes("4Gi") == 4 << 30 and memory_bytes("512Mi") == 512 << 20
    assert memory_bytes("1G") == 10**9 and memory_bytes("1e9") == 10**9 and memory_bytes("1500k".upper()) == 1_500_000
    with pytest.raises(ValueError, match="not a memory quantity"):
        memory_bytes("lots")


def test_a_process_past_the_limit_is_oom_killed_and_one_within_it_is_not() -> None:
    limits = MemoryLimits()
    assert limits.enforced, "the node agent needs a writable memory cgroup here (root, cgroup v1 or v2)"
    name = f"test-{uuid.uuid4().hex[:8]}"
    procs = limits.create(name, "64Mi")
    assert procs is not None
    try:
        small = [sys.executable, "-c", "b = b'x' * (8 << 20)"]
        assert subprocess.run(["/bin/sh", "-c", JOIN, str(procs), *small]).returncode == 0
        assert not limits.oom_killed(name)
        big = [sys.executable, "-c", "b = b'x' * (256 << 20)"]
        assert subprocess.run(["/bin/sh", "-c", JOIN, str(procs), *big]).returncode == -9
        assert limits.oom_killed(name)
    finally:
        limits.remove(name)
    assert limits.procs_file(name) is None
