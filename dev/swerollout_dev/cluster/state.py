"""The cluster supervisor's state file (written by the supervisor only, atomically)."""

from __future__ import annotations

from swerollout_dev.stack.state import SupervisorState


class ClusterState(SupervisorState):
    node_name: str = ""
    node_ip: str = ""
