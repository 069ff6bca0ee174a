"""The result of one rollout, as the trainer receives it.

Token arrays are aligned on ``response_ids``: the tokens after the prompt (the
policy's sampled tokens with loss_mask 1 and their logprobs and weight versions,
and the chat-template/environment tokens between them with loss_mask 0, logprob
0.0, version None). ``prompt_ids + response_ids`` is the conversation's full token
list. Encoded with swerollout.wire.codec: int32 ids, uint8 mask, float32 logprobs
(so decoded logprobs are float32-rounded), uint16 indices into a version table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerollout.wire.codec import UnsupportedVersionError, decode, encode

TRAJECTORY_KIND = "trajectory"
TRAJECTORY_SCHEMA = 1


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = TRAJECTORY_SCHEMA
    run_uid: str = ""
    """The rollout's id (the SWERollout's uid)."""
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    """Per response token: 1 = sampled by the policy (train on it), 0 = context."""
    logprobs: list[float] = Field(default_factory=list)
    """Per response token: sampling logprob, 0.0 where loss_mask is 0."""
    weight_versions: list[str | None] = Field(default_factory=list)
    """Per response token: the policy weight version that sampled it, None for context."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The conversation in OpenAI message shape (for reading; tokens are the truth)."""
    exit_status: str | None = None
    """SWE-agent exit status (submitted, exit_context, exit_format, ...); None if unfinished."""
    submission: str = ""
    """The submitted patch (git diff), empty if none."""
    turns: int = 0
    """Assistant turns sampled."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per phase (e.g. generation, tools, total)."""
    routed_experts: list[Any] | None = None
    """Per turn, the server's routed-experts payload when requested (MoE routing replay)."""
    info: dict[str, Any] = Field(default_factory=dict)
    """Free-form extras (rids, attempts, truncation flags)."""

    @model_validator(mode="after")
    def _aligned(self) -> Trajectory:
        n = len(self.response_ids)
        for name in ("loss_mask", "logprobs", "weight_versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, response_ids has {n}")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask entries must be 0 or 1")
        return self

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_bytes(self) -> bytes:
        table: list[str | None] = [None]
        index: dict[str | None, int] = {None: 0}
        slots = np.empty(len(self.weight_versions), dtype="<u2")
        for i, version in enumerate(self.weight_versions):
            slot = index.get(version)
            if slot is None:
                slot = index[version] = len(table)
                table.append(version)
            slots[i] = slot
        meta = self.model_dump(
            exclude={"prompt_ids", "response_ids", "loss_mask", "logprobs", "weight_versions"}
        )
        meta["version_table"] = table
        return encode(
            TRAJECTORY_KIND,
            meta,
            {
                "prompt_ids": self.prompt_ids,
                "response_ids": self.response_ids,
                "loss_mask": self.loss_mask,
                "logprobs": self.logprobs,
                "version_index": slots,
            },
            dtypes={"prompt_ids": "<i4", "response_ids": "<i4", "loss_mask": "|u1", "logprobs": "<f4"},
        )

    @classmethod
    def from_bytes(cls, blob: bytes) -> Trajectory:
        decoded = decode(blob, kind=TRAJECTORY_KIND)
        meta = dict(decoded.meta)
        schema = meta.get("schema_version", 0)
        if schema > TRAJECTORY_SCHEMA:
            raise UnsupportedVersionError(
                f"trajectory schema v{schema} is newer than this reader's v{TRAJECTORY_SCHEMA}: upgrade swerollout"
            )
        table = meta.pop("version_table")
        arrays = decoded.arrays
        return cls(
            **meta,
            prompt_ids=arrays["prompt_ids"].tolist(),
            response_ids=arrays["response_ids"].tolist(),
            loss_mask=arrays["loss_mask"].tolist(),
            logprobs=arrays["logprobs"].astype(float).tolist(),
            weight_versions=[table[i] for i in arrays["version_index"].tolist()],
        )
