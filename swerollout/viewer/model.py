"""One rollout as the viewer reads it: the shape `swerollout results` writes
(:meth:`swerollout.client.RolloutRecord.to_dict`), validated at the boundary."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ViewRecord(BaseModel):
    """A results row. Older files lack the newer fields; they default to empty."""

    model_config = ConfigDict(extra="ignore")

    name: str
    batch: str = ""
    sample: int = -1
    member: int = -1
    instance_id: str = ""
    phase: str = ""
    status: str = ""
    exit_status: str | None = None
    reward: float | None = None
    resolved: bool | None = None
    graded: bool | None = None
    turns: int = 0
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    weight_versions: list[str | None] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    submission: str = ""
    tokenizer: str | None = None
    attempts: int = 0
    times: dict[str, str] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    report: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> ViewRecord:
        n = len(self.response_ids)
        for name in ("loss_mask", "logprobs", "weight_versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries but response_ids has {n}")
        return self
