"""The result of one rollout, as the trainer receives it.

Token arrays are aligned on ``response_ids``: the tokens after the prompt (the
policy's sampled tokens with loss_mask 1 and their logprobs and weight versions,
and the chat-template/environment tokens between them with loss_mask 0, logprob
0.0, version None). ``prompt_ids + response_ids`` is the conversation's full token
list. Encoded with swerollout.wire.codec: int32 ids, uint8 mask, float32 logprobs
(so decoded logprobs are float32-rounded), uint16 indices into a version table.

MoE routing replay (the one place that states how routing rows line up with tokens):

- ``routed_experts`` holds exactly ONE ROW PER TOKEN of ``prompt_ids + response_ids``,
  row ``i`` for token ``i``, each row ``routed_experts_width`` (= layers x top_k)
  little-endian int32 expert ids, layer-major as SGLang returns them (a trainer
  reshapes a row to ``[layers, top_k]``). ``routed_experts_array()`` gives
  ``[len(prompt_ids) + len(response_ids), width]``.
- Rows ``[0, routed_experts_forwarded)`` are the server's routing of the tokens it
  forwarded. The rows from ``routed_experts_forwarded`` on are zero filler, never
  routing: SGLang never forwards the final sampled token (so at least that row is
  filler), nor tokens appended after the last request (the template delta of a run
  that ended on the context limit or an abort). No forward pass computes a trained
  logprob from a filler row's token, so the filler never reaches a gradient.
- verl (``AgentLoopOutput.routed_experts``, ``[len, layers, top_k]`` over the whole
  sequence; it zero-fills rows it has no routing for) takes the array as it is.
  slime (``Sample.rollout_routed_experts``, exactly ``[len(tokens) - 1, layers,
  top_k]``; it pads the final row itself) takes ``routed_experts_array()[:-1]``.
  ``routed_experts_for_slime()`` and ``routed_experts_for_verl()`` give both, shaped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerollout.wire.codec import UnsupportedVersionError, decode, encode

TRAJECTORY_KIND = "trajectory"
TRAJECTORY_SCHEMA = 3
"""v3: routed_experts has one row per token, the final ones zero filler past routed_experts_forwarded.
v2 stored the forwarded rows only (one fewer than tokens); v1 stored whole per-turn payloads."""


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
    routed_experts: bytes | None = None
    """Little-endian int32 routing rows, one per token (see the module doc); None when not requested or not returned."""
    routed_experts_width: int | None = None
    """int32 values per routing row (layers x top_k)."""
    routed_experts_forwarded: int | None = None
    """Leading rows that are the server's routing; the rows after them are zero filler (see the module doc)."""
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
        if self.routed_experts is not None:
            width = self.routed_experts_width or 0
            rows = len(self.prompt_ids) + len(self.response_ids)
            if width <= 0 or len(self.routed_experts) != 4 * width * rows:
                raise ValueError(
                    f"routed_experts holds {len(self.routed_experts)} bytes; {rows} rows (one per token) of "
                    f"routed_experts_width {self.routed_experts_width} int32 values need {4 * width * rows}"
                )
            forwarded = self.routed_experts_forwarded
            if forwarded is None or not 0 <= forwarded <= rows - 1:
                raise ValueError(
                    f"routed_experts_forwarded is {forwarded}; with routed_experts it must be 0..{rows - 1} "
                    "(the final token is never forwarded)"
                )
        return self

    def routed_experts_array(self) -> np.ndarray[Any, np.dtype[np.int32]] | None:
        """The routing rows shaped ``[len(prompt_ids) + len(response_ids), layers * top_k]``, one per token."""
        if self.routed_experts is None or not self.routed_experts_width:
            return None
        return np.frombuffer(self.routed_experts, dtype="<i4").reshape(-1, self.routed_experts_width)

    def routed_experts_for_verl(self, layers: int) -> np.ndarray[Any, np.dtype[np.int32]] | None:
        """verl's ``AgentLoopOutput.routed_experts``: ``[len(prompt_ids) + len(response_ids), layers, top_k]``."""
        rows = self.routed_experts_array()
        return None if rows is None else rows.reshape(rows.shape[0], layers, -1)

    def routed_experts_for_slime(self, layers: int) -> np.ndarray[Any, np.dtype[np.int32]] | None:
        """slime's ``Sample.rollout_routed_experts``: ``[len(tokens) - 1, layers, top_k]`` (slime pads the last row)."""
        rows = self.routed_experts_array()
        return None if rows is None else rows[:-1].reshape(rows.shape[0] - 1, layers, -1)

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
            exclude={"prompt_ids", "response_ids", "loss_mask", "logprobs", "weight_versions", "routed_experts"}
        )
        meta["version_table"] = table
        routed = (
            {} if self.routed_experts is None else {"routed_experts": np.frombuffer(self.routed_experts, dtype="<i4")}
        )
        return encode(
            TRAJECTORY_KIND,
            meta,
            {
                "prompt_ids": self.prompt_ids,
                "response_ids": self.response_ids,
                "loss_mask": self.loss_mask,
                "logprobs": self.logprobs,
                "version_index": slots,
                **routed,
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
        arrays = dict(decoded.arrays)
        if schema < 2:
            meta.pop("routed_experts", None)  # v1's per-turn payloads do not line up with tokens
            arrays.pop("routed_experts", None)
        if "routed_experts" in arrays:
            routed = arrays["routed_experts"].astype("<i4")
            if schema < 3:
                # v2: the forwarded rows only, one fewer than tokens; the final row becomes filler.
                width = int(meta.get("routed_experts_width") or 0)
                meta["routed_experts_forwarded"] = len(routed) // width if width else 0
                routed = np.concatenate([routed, np.zeros(width, dtype="<i4")])
            meta["routed_experts"] = routed.tobytes()
        return cls(
            **meta,
            prompt_ids=arrays["prompt_ids"].tolist(),
            response_ids=arrays["response_ids"].tolist(),
            loss_mask=arrays["loss_mask"].tolist(),
            logprobs=arrays["logprobs"].astype(float).tolist(),
            weight_versions=[table[i] for i in arrays["version_index"].tolist()],
        )
