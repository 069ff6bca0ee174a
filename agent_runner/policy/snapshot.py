"""Snapshot of a token-tracking conversation, for abort -> resume on the same pod.

A snapshot holds everything RLTokenModel needs to continue exactly where it stopped
(messages, the token buffer, rid counter, budgets used, per-turn records) plus the
agent loop's own state dict, which it hands in and gets back untouched. It is
encoded with swerollout.wire.codec (kind "snapshot"): the JSON parts go in the
header, the token arrays are packed (int32 ids, uint8 mask, float32 logprobs,
uint16 weight-version indices), zlib-compressed and sha256-checked.

Restoring a blob of a newer snapshot schema, of another kind, or a corrupted blob
raises agent_runner.policy.errors.SnapshotError with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runner.policy.errors import SnapshotError
from agent_runner.policy.tokens import TokenBuffer
from swerollout.wire.codec import CodecError, decode, encode

SNAPSHOT_KIND = "snapshot"
SNAPSHOT_SCHEMA = 1


class TurnRecord(BaseModel):
    """One /generate call of the conversation, accepted or aborted."""

    model_config = ConfigDict(extra="forbid")

    rid: str
    finish: str
    sampled: int
    """Tokens the server returned for this request."""
    kept: bool
    """True when this request's tokens are in the list: all of an answered one, or under
    onAbort Keep the logprob-carrying prefix of an aborted one; False when dropped."""
    kept_tokens: int = 0
    """How many of its tokens are in the list (``sampled`` minus what was dropped)."""
    weight_version: str | None = None
    attempts: int = 1


class ModelState(BaseModel):
    """The JSON part of RLTokenModel's state (token arrays travel separately)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(default_factory=list)
    pending: list[dict[str, Any]] = Field(default_factory=list)
    """Messages added but not yet turned into tokens."""
    awaiting_generation: bool = False
    """The token list ends with a generation prompt (set up for a request not yet answered)."""
    last_sampled_id: int | None = None
    partial_tokens: int = 0
    """Sampled tokens of the owed turn already in the list (kept from aborted requests
    under onAbort Keep); the next request continues the turn after them."""
    turn_counter: int = 0
    """Requests started (the turn number in rids); never reused after a resume."""
    sampled_total: int = 0
    """Tokens the server generated, dropped ones included (the token budget spent)."""
    dropped_total: int = 0
    replaced_code_points: int = 0
    """Unencodable code points of environment text replaced with U+FFFD (agent_runner.policy.text)."""
    turns: list[TurnRecord] = Field(default_factory=list)
    routed_experts: list[str] = Field(default_factory=list)
    """Base64 int32 routing rows of each kept turn, only the rows that turn added
    (requested with routed_experts_start_len), so their concatenation has one row
    per token read by the model."""
    routed_experts_rows: int = 0
    routed_experts_width: int | None = None
    """int32 values per row (layers x top_k)."""
    version_sources: dict[str, str] = Field(default_factory=dict)
    """Per weight-version label: "server" (reported by SGLang) or "spec" (the spec's
    weightVersion, used while the server reported none or "default")."""
    notes: list[str] = Field(default_factory=list)
    """Things the trainer must know about this run (limits lowered, data missing)."""
    expanded_image_tokens: int = 0
    """Tokens the server's multimodal processor expanded the image placeholders into, beyond
    the one placeholder token per image the list holds (its prompt_tokens minus the ids sent)."""


class Snapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    schema_version: int = SNAPSHOT_SCHEMA
    state: ModelState
    agent_state: dict[str, Any] = Field(default_factory=dict)
    buffer: TokenBuffer

    def to_bytes(self) -> bytes:
        buf = self.buffer
        meta = {
            "schema_version": self.schema_version,
            "state": self.state.model_dump(mode="json"),
            "agent_state": self.agent_state,
            "versions": buf.versions,
            "prompt_length": buf.prompt_length,
        }
        return encode(
            SNAPSHOT_KIND,
            meta,
            {
                "input_ids": buf.input_ids,
                "loss_mask": np.frombuffer(bytes(buf.loss_mask), dtype="|u1"),
                "logprobs": buf.logprobs,
                "version_index": buf.version_index,
            },
            dtypes={"input_ids": "<i4", "logprobs": "<f4", "version_index": "<u2"},
        )

    @classmethod
    def from_bytes(cls, blob: bytes) -> Snapshot:
        try:
            decoded = decode(blob, kind=SNAPSHOT_KIND)
        except CodecError as exc:
            raise SnapshotError(f"cannot restore snapshot: {exc}") from exc
        meta = decoded.meta
        schema = meta.get("schema_version")
        if not isinstance(schema, int) or schema > SNAPSHOT_SCHEMA:
            raise SnapshotError(
                f"snapshot schema v{schema} is not readable by this runner (reads up to v{SNAPSHOT_SCHEMA}); "
                "resume it with the runner version that wrote it"
            )
        try:
            arrays = decoded.arrays
            buffer = TokenBuffer(
                input_ids=arrays["input_ids"].tolist(),
                loss_mask=bytearray(arrays["loss_mask"].tobytes()),
                logprobs=arrays["logprobs"].astype(float).tolist(),
                version_index=arrays["version_index"].tolist(),
                versions=list(meta["versions"]),
                prompt_length=int(meta["prompt_length"]),
            )
            buffer.check()
            return cls(
                schema_version=schema,
                state=ModelState.model_validate(meta["state"]),
                agent_state=dict(meta.get("agent_state") or {}),
                buffer=buffer,
            )
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise SnapshotError(f"snapshot content is inconsistent: {exc}") from exc
