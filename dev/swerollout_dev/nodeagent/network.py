"""Pod addresses on a node without a pod network.

Every container shares the host's network stack, but Linux routes all of
127.0.0.0/8 to the loopback interface, so each pod gets its own loopback
address (127.x.y.z, outside 127.0.0.0/16) as its podIP. A server that binds
its pod's address cannot collide with the same port of another pod, and
probes reach it the Kubernetes way (at the podIP). Containers learn the
address from status.podIP (fieldRef) or SWEROLLOUT_POD_LOOPBACK.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

HOST_IP = "127.0.0.1"
POD_LOOPBACK_ENV = "SWEROLLOUT_POD_LOOPBACK"
_FIRST = 1 << 16  # skip 127.0.0.0/16: 127.0.0.1, Debian's 127.0.1.1 hostname entry, ...
_COUNT = (254 << 16) - 2


def _address(n: int) -> str:
    value = _FIRST + n % _COUNT + 1
    return f"127.{(value >> 16) & 0xFF}.{(value >> 8) & 0xFF}.{value & 0xFF}"


def allocate_loopback(uid: str, taken: Collection[str]) -> str:
    """A stable address for pod ``uid`` (derived from it), skipping addresses in use."""
    start = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big")
    for step in range(_COUNT):
        candidate = _address(start + step)
        last = candidate.rpartition(".")[2]
        if last not in ("0", "255") and candidate not in taken:
            return candidate
    raise RuntimeError("no free pod loopback address")  # 16 million pods on one node
