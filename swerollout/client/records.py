"""What the trainer gets back for one rollout, and how a rollout's outcome maps to
the four statuses RL trainers (slime, verl) distinguish."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, SkipValidation, ValidationError

from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import (
    LABEL_BATCH,
    LABEL_MEMBER,
    LABEL_SAMPLE,
    ConditionStatus,
    ConditionType,
    Partial,
    Phase,
    SWERolloutStatus,
)
from swerollout.client.errors import ClientError
from swerollout.exit_status import is_failed_run, is_truncated
from swerollout.wire.trajectory import Trajectory

ANNOTATION_INSTANCE_ID = "swerollout.io/instance-id"
ANNOTATION_TRAINER_LABELS = "swerollout.io/trainer-labels"
"""JSON object of the trainer's own ids for the sample (``trainer_labels=`` at submit)."""

# Each pass drops every unknown field pydantic reported; nested unknowns may need another pass.
MAX_UNKNOWN_FIELD_PASSES = 8


def _column(arrow: str, default: Any = None, *, factory: Any = None) -> Any:
    """A row field with its Parquet column type: `string`, `int32`, `bool`, `list<int32>`,
    ..., or `json` (a nested value that table formats hold as a JSON string)."""
    if factory is not None:
        return Field(default_factory=factory, json_schema_extra={"arrow": arrow})
    return Field(default=default, json_schema_extra={"arrow": arrow})


class RecordRow(BaseModel):
    """A RolloutRecord as one row: what ``to_dict`` returns, the columns `swerollout results`
    writes (Parquet or JSON lines, in this order, each field's ``arrow`` type its Parquet
    column) and what the viewer reads back (``ViewRecord``). One model, so a field added to
    the record reaches the file and the viewer together. Every field has a default: a file
    written before a column existed still loads."""

    model_config = ConfigDict(extra="ignore")

    name: str = _column("string", ...)
    batch: str = _column("string", "")
    sample: int = _column("int32", -1)
    member: int = _column("int32", -1)
    instance_id: str = _column("string", "")
    phase: str = _column("string", "")
    status: str = _column("string", "")
    exit_status: str | None = _column("string")
    reward: float | None = _column("float64")
    resolved: bool | None = _column("bool")
    graded: bool | None = _column("bool")
    turns: int = _column("int32", 0)
    sampled_tokens: int = _column("int64", 0)
    dropped_tokens: int = _column("int64", 0)
    prompt_ids: list[int] = _column("list<int32>", factory=list)
    response_ids: list[int] = _column("list<int32>", factory=list)
    loss_mask: list[int] = _column("list<uint8>", factory=list)
    logprobs: list[float] = _column("list<float32>", factory=list)
    weight_versions: list[str | None] = _column("list<string>", factory=list)
    submission: str = _column("string", "")
    messages: list[dict[str, Any]] = _column("json", factory=list)
    tokenizer: str | None = _column("string")
    attempts: int = _column("int32", 0)
    times: dict[str, str] = _column("json", factory=dict)
    timings: dict[str, float] = _column("json", factory=dict)
    info: dict[str, Any] = _column("json", factory=dict)
    report: dict[str, Any] | None = _column("json")
    truncated: bool = _column("bool", False)
    trainer_labels: dict[str, Any] = _column("json", factory=dict)
    partial: dict[str, Any] | None = _column("json")
    # Not validated on the way in: up to prompt + response rows of layers * top_k ids each.
    routed_experts: Annotated[list[list[int]] | None, SkipValidation] = _column("list<list<int32>>")


def column_types() -> dict[str, str]:
    """Each row column and its ``arrow`` type, in file order."""
    return {name: str((f.json_schema_extra or {})["arrow"]) for name, f in RecordRow.model_fields.items()}  # type: ignore[index]


JSON_FIELDS = tuple(name for name, arrow in column_types().items() if arrow == "json")
"""Nested row fields that table formats (Parquet) hold as JSON strings."""


class TrainerStatus(StrEnum):
    COMPLETED = "completed"
    """The agent ended the run itself (submitted, or hit a turn/format/time limit); reward is final."""
    TRUNCATED = "truncated"
    """The run hit the context limit (exit_context)."""
    ABORTED = "aborted"
    """Not finished: aborted for a weight update (or still running); no final trajectory yet."""
    FAILED = "failed"
    """The rollout failed (phase Failed) or ended on an infrastructure error."""


def trainer_status(phase: Phase, exit_status: str | None, graded: bool = False) -> TrainerStatus:
    """The trainer-facing status of a rollout from its phase and SWE-agent exit status.

    The operator ends an ungraded infrastructure exit (exit_api, ...) in phase Failed,
    so `failed` here, `kubectl get` and `swerollout watch` agree. A graded one (validate
    mode grades autosubmissions) has a real reward and counts as completed. A Succeeded
    rollout with an ungraded infrastructure exit (written by an older operator) is
    still failed."""
    if phase is Phase.FAILED:
        return TrainerStatus.FAILED
    if phase is not Phase.SUCCEEDED:
        return TrainerStatus.ABORTED
    if is_truncated(exit_status or ""):
        return TrainerStatus.TRUNCATED
    if is_failed_run(exit_status, graded):
        return TrainerStatus.FAILED
    return TrainerStatus.COMPLETED


def _empty(dtype: str) -> npt.NDArray[Any]:
    return np.zeros(0, dtype=dtype)


def align_routed_experts(trajectory: Trajectory) -> npt.NDArray[np.int32] | None:
    """The trajectory's MoE routing rows aligned to ``prompt_ids + response_ids``:
    ``[len(prompt_ids) + len(response_ids), layers * top_k]`` int32, row *i* = the experts
    each layer routed token *i* to when the model read it. None when the run did not
    record routing (``spec.inference.returnRoutedExperts`` off, or the server returned none).

    How stored rows line up with tokens is stated in :mod:`swerollout.wire.trajectory`:
    schema v3 stores one row per token (zero filler where the server forwarded none, at
    least the final sampled token's); v2 blobs stored ``N - 1`` rows, so their final row
    is added here as the same zero filler. slime wants SGLang's ``N - 1`` rows: ``[:-1]``.
    More rows than tokens, or
    more than one missing, is a corrupt trajectory and raises ClientError.
    """
    rows = trajectory.routed_experts_array()
    if rows is None:
        return None
    tokens = len(trajectory.prompt_ids) + len(trajectory.response_ids)
    if not tokens - 1 <= rows.shape[0] <= tokens:
        raise ClientError(
            f"the trajectory of run {trajectory.run_uid or '?'} holds {rows.shape[0]} routed-expert rows for "
            f"{tokens} tokens (expected {tokens - 1} or {tokens}); the runner and this client disagree on the format"
        )
    aligned = np.zeros((tokens, rows.shape[1]), dtype=np.int32)
    aligned[: rows.shape[0]] = rows
    return aligned


def versions_to_int(versions: npt.NDArray[np.object_], default: int = -1) -> npt.NDArray[np.int64]:
    """Per-token weight versions as integers: ``default`` where a token has none (context
    tokens); ClientError naming the first version that is not an integer."""
    out = np.full(len(versions), default, dtype=np.int64)
    for i, version in enumerate(versions.tolist()):
        if version is None:
            continue
        try:
            out[i] = int(version)
        except (TypeError, ValueError):
            raise ClientError(
                f"weight version {version!r} (response token {i}) is not an integer; integer versions are "
                "needed here: submit with weight_version=str(step) and update SGLang with integer versions"
            ) from None
    return out


@dataclass(frozen=True, eq=False)
class RolloutRecord:
    """One finished (or, for ``aborted``, unfinished) rollout, ready for a trainer.

    Token arrays follow :class:`swerollout.wire.trajectory.Trajectory`: aligned on
    ``response_ids``; ``loss_mask`` 1 marks tokens the policy sampled.
    """

    name: str
    namespace: str
    batch: str
    sample: int
    member: int
    instance_id: str
    phase: Phase
    status: TrainerStatus
    exit_status: str | None = None
    reward: float | None = None
    resolved: bool | None = None
    graded: bool | None = None
    turns: int = 0
    message: str = ""
    prompt_ids: npt.NDArray[np.int32] = field(default_factory=lambda: _empty("int32"))
    response_ids: npt.NDArray[np.int32] = field(default_factory=lambda: _empty("int32"))
    loss_mask: npt.NDArray[np.uint8] = field(default_factory=lambda: _empty("uint8"))
    logprobs: npt.NDArray[np.float32] = field(default_factory=lambda: _empty("float32"))
    weight_versions: npt.NDArray[np.object_] = field(default_factory=lambda: _empty("object"))
    """Per response token: the weight version that sampled it, None for context tokens."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    submission: str = ""
    tokenizer: str | None = None
    """spec.inference.tokenizer: what decodes the token ids (a bundled name or a directory)."""
    attempts: int = 0
    """Pods started for this rollout (more than one: replayed into a fresh pod)."""
    times: dict[str, str] = field(default_factory=dict)
    """Lifecycle timestamps (ISO 8601) that are known: created, sandbox_started, running,
    evaluating, completed."""
    timings: dict[str, float] = field(default_factory=dict)
    """The runner's seconds per phase (Trajectory.timings)."""
    info: dict[str, Any] = field(default_factory=dict)
    """The runner's extras (Trajectory.info: rids, the turn log with aborted requests, ...)."""
    report: dict[str, Any] | None = None
    """The full eval report (every FAIL_TO_PASS / PASS_TO_PASS test and its outcome) when fetched."""
    dropped_tokens: int = 0
    """Tokens the policy sampled in requests that were aborted and dropped (not in the arrays);
    with ``sampled_tokens`` (kept) they add up to what spec.inference.maxSampledTokens counts."""
    truncated: bool = False
    """The run ended on a length limit (maxContextTokens or maxSampledTokens, exit_context)."""
    routed_experts: npt.NDArray[np.int32] | None = None
    """MoE routing ``[len(prompt_ids) + len(response_ids), layers * top_k]`` (see
    :func:`align_routed_experts`); None when not recorded."""
    trainer_labels: dict[str, Any] = field(default_factory=dict)
    """The trainer's own ids for the sample (uid, index, ...), as given at submit."""
    partial: Partial | None = None
    """Where an aborted (suspended) run stopped: turns and tokens so far, the weight
    version of its last token, when and why it was aborted, and its snapshot. None
    unless the rollout is (or was last) aborted; a resumed run continues from there."""
    generated_tokens: int = 0
    """Tokens sampled so far by the policy (progress; for a finished run, its response tokens)."""

    def versions_as_int(self, default: int = -1) -> npt.NDArray[np.int64]:
        """Per response token: the weight version as an int, ``default`` for context tokens."""
        return versions_to_int(self.weight_versions, default)

    @property
    def tokens(self) -> npt.NDArray[np.int32]:
        """``prompt_ids + response_ids``: the conversation's full token list."""
        return np.concatenate([self.prompt_ids, self.response_ids]).astype(np.int32)

    @property
    def sampled_tokens(self) -> int:
        """Sampled tokens kept in the arrays (loss mask 1)."""
        return int(self.loss_mask.sum())

    def summary(self) -> dict[str, Any]:
        """The scalar fields (for tables and JSON lines)."""
        return {
            "name": self.name,
            "batch": self.batch,
            "sample": self.sample,
            "member": self.member,
            "instance_id": self.instance_id,
            "phase": self.phase.value,
            "status": self.status.value,
            "exit_status": self.exit_status,
            "reward": self.reward,
            "resolved": self.resolved,
            "graded": self.graded,
            "turns": self.turns,
            "truncated": self.truncated,
            "sampled_tokens": self.sampled_tokens,
            "dropped_tokens": self.dropped_tokens,
        }

    def to_dict(self) -> dict[str, Any]:
        """The record as its row (RecordRow's columns): plain Python values, lists instead of arrays."""
        return {name: _plain(getattr(self, name)) for name in RecordRow.model_fields}


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Partial):
        return value.to_wire()
    return value


def member_identity(obj: dict[str, Any]) -> tuple[str, int, int, str]:
    """(batch, sample, member, instance id) from an object's labels and annotations."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec_instance = ((obj.get("spec") or {}).get("instance") or {}).get("instanceId", "")
    return (
        labels.get(LABEL_BATCH, ""),
        _int(labels.get(LABEL_SAMPLE)),
        _int(labels.get(LABEL_MEMBER)),
        annotations.get(ANNOTATION_INSTANCE_ID) or spec_instance,
    )


def trainer_labels_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The trainer labels set at submit (an empty dict when none or unreadable)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TRAINER_LABELS)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1


def parse_status(obj: dict[str, Any]) -> SWERolloutStatus:
    """The object's status. Fields this client does not know (written by a newer
    operator) are dropped rather than failing the trainer; anything else is an error."""
    status = copy.deepcopy(obj.get("status") or {})
    for _ in range(MAX_UNKNOWN_FIELD_PASSES):
        try:
            return SWERolloutStatus.model_validate(status)
        except ValidationError as exc:
            unknown = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
            if not unknown or len(unknown) != len(exc.errors()):
                name = (obj.get("metadata") or {}).get("name", "?")
                raise ClientError(
                    f"the status of SWERollout {name} is not readable by this client: {one_line(exc, 'status')}"
                ) from exc
            for loc in unknown:
                _drop(status, loc)
    raise ClientError("too many unknown status fields; upgrade swerollout")


def _drop(tree: Any, loc: tuple[int | str, ...]) -> None:
    for key in loc[:-1]:
        tree = tree[key]
    if isinstance(tree, dict):
        tree.pop(loc[-1], None)


def lifecycle_times(obj: dict[str, Any], status: SWERolloutStatus) -> dict[str, str]:
    """When the rollout was created, got a pod, started running, started evaluating and
    finished, as far as the object records it (each phase's latest start)."""
    times: dict[str, str] = {}
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if created:
        times["created"] = str(created)
    if status.sandbox is not None and status.sandbox.started_at is not None:
        times["sandbox_started"] = status.sandbox.started_at.isoformat()
    ready = next(
        (
            c
            for c in status.conditions
            if c.type == ConditionType.SANDBOX_READY.value and c.status is ConditionStatus.TRUE
        ),
        None,
    )
    if ready is not None:
        times["running"] = ready.last_transition_time.isoformat()
    if status.evaluation is not None and status.evaluation.started_at is not None:
        times["evaluating"] = status.evaluation.started_at.isoformat()
    if status.completion_time is not None:
        times["completed"] = status.completion_time.isoformat()
    return times


def build_record(
    obj: dict[str, Any], trajectory: Trajectory | None, report: dict[str, Any] | None = None
) -> RolloutRecord:
    """A record from the object as read from the API server, its decoded trajectory and
    (when fetched) its eval report."""
    meta = obj.get("metadata") or {}
    status = parse_status(obj)
    batch, sample, member, instance_id = member_identity(obj)
    result, reward = status.result, status.reward
    exit_status = result.exit_status if result else (trajectory.exit_status if trajectory else None)
    arrays: dict[str, Any] = {}
    if trajectory is not None:
        arrays = {
            "prompt_ids": np.asarray(trajectory.prompt_ids, dtype=np.int32),
            "response_ids": np.asarray(trajectory.response_ids, dtype=np.int32),
            "loss_mask": np.asarray(trajectory.loss_mask, dtype=np.uint8),
            "logprobs": np.asarray(trajectory.logprobs, dtype=np.float32),
            "weight_versions": np.asarray(trajectory.weight_versions, dtype=object),
            "messages": trajectory.messages,
            "submission": trajectory.submission,
            "timings": trajectory.timings,
            "info": trajectory.info,
            "dropped_tokens": int(trajectory.info.get("dropped_total", 0)),
            "routed_experts": align_routed_experts(trajectory),
        }
    inference = (obj.get("spec") or {}).get("inference") or {}
    truncated = is_truncated(exit_status or "")
    generated = status.progress.generated_tokens if status.progress else 0
    if result is not None:
        generated = max(generated, result.response_tokens)
    return RolloutRecord(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        batch=batch,
        sample=sample,
        member=member,
        instance_id=instance_id,
        phase=status.phase,
        status=trainer_status(status.phase, exit_status, bool(reward and reward.graded)),
        exit_status=exit_status,
        reward=reward.value if reward else None,
        resolved=reward.resolved if reward else None,
        graded=reward.graded if reward else None,
        turns=result.turns if result else 0,
        message=status.message,
        tokenizer=inference.get("tokenizer"),
        attempts=status.attempts,
        times=lifecycle_times(obj, status),
        report=report,
        truncated=truncated,
        trainer_labels=trainer_labels_of(obj),
        partial=status.partial,
        generated_tokens=generated,
        **arrays,
    )
