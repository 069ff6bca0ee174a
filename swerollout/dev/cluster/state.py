"""The cluster supervisor's state file (written by the supervisor only, atomically)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swerollout.dev.stack.state import ComponentState


class ClusterState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["starting", "ready", "failed", "stopping"] = "starting"
    message: str = ""
    supervisor: ComponentState
    kubeconfig: str
    server_url: str = ""
    node_name: str = ""
    node_ip: str = ""
    components: dict[str, ComponentState] = Field(default_factory=dict)

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> ClusterState | None:
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None
