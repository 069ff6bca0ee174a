"""The dev supervisor's state file: who runs, with which pid, and how it is doing.

Written by the supervisor only (atomically); read by `dev status` / `dev down`.
Processes are identified by pid + start time, so a recycled pid is never
mistaken for a component.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from swerollout_dev.nodeagent.process import start_ticks

ComponentStatus = Literal["starting", "running", "ready", "restarting", "exited", "skipped", "failed"]


class ComponentState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: ComponentStatus = "starting"
    pid: int | None = None
    start_ticks: int | None = None
    detail: str = ""
    """What a user needs: the URL it serves, why it was skipped, how it ended."""
    log: str | None = None
    restarts: int = 0

    def alive(self) -> bool:
        return self.pid is not None and self.start_ticks is not None and start_ticks(self.pid) == self.start_ticks


class SupervisorState(BaseModel):
    """What every supervisor (`dev up`, `cluster up`) records: its own process, its components, where to connect."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["starting", "ready", "failed", "stopping"] = "starting"
    message: str = ""
    supervisor: ComponentState
    kubeconfig: str
    server_url: str = ""
    components: dict[str, ComponentState] = Field(default_factory=dict)

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> Self | None:
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None


class DevState(SupervisorState):
    sglang_url: str = ""
    """What rollouts use: the stand-in, its gateway (``--gateway smg``) or ``--sglang-url``."""
    engine_urls: list[str] = Field(default_factory=list)
    """The stand-in engines (``--engines N``); behind the gateway when there is one."""
    inference_api_key_secret: str = ""
    """`name/key` of the gateway's key (spec.inference.apiKeySecretRef); empty without --gateway."""
    inference_admin_key_secret: str = ""
    """`name/key` of the Secret in namespace default holding the policy server's admin key
    (for spec.inference.adminKeySecretRef); empty without --policy."""
    operator_metrics_url: str = ""
    """The operator's /metrics (what a ServiceMonitor scrapes in a cluster); empty without an operator."""

    def api_key_secret_ref(self) -> dict[str, str] | None:
        """spec.inference.apiKeySecretRef for the dev gateway (None without one)."""
        name, _, key = self.inference_api_key_secret.partition("/")
        return {"name": name, "key": key} if name and key else None

    def admin_key_secret_ref(self) -> dict[str, str] | None:
        """spec.inference.adminKeySecretRef for the dev policy server (None without one)."""
        name, _, key = self.inference_admin_key_secret.partition("/")
        return {"name": name, "key": key} if name and key else None
