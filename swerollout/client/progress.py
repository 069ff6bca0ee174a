"""A batch's state at one moment, as ``wait`` and ``watch`` report it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swerollout.api.v1alpha1 import LABEL_SAMPLE, Phase, SWERolloutBatchSpec, batch_name, is_suspended, suspended_by
from swerollout.client.records import TrainerStatus, parse_status, trainer_status


@dataclass(frozen=True)
class MemberState:
    name: str
    phase: Phase
    turns: int
    generated_tokens: int
    reward: float | None
    resolved: bool | None
    exit_status: str | None
    suspend: bool
    """Whether the member is suspended: its own ``spec.suspend`` or its batch's
    (``swerollout.api.v1alpha1.is_suspended``, the operator's rule), as far as the batch objects
    given to :func:`member_state` tell."""
    suspended_by: str = ""
    """Who suspends it, e.g. ``batch step-7`` or ``spec.suspend``; '' when nobody does."""
    message: str = ""
    """The operator's summary of the latest phase change (why it failed, for example)."""
    status: TrainerStatus = TrainerStatus.ABORTED
    """What the trainer's records say of this member (`results`, the client's records)."""
    queue_reason: str = ""
    """Why a Queued member waits (QuotaExceeded, Unschedulable, AwaitingAdmission); '' otherwise."""
    sample: str = ""
    """Its GRPO group (the ``swerollout.io/sample`` label the client sets; '' without one)."""
    attempts: int = 0
    """Rollout pods it used (a replay after a lost pod or an infrastructure exit adds one)."""
    retries: tuple[str, ...] = ()
    """Why each lost attempt was retried, oldest first (``status.retries[].reason``:
    PodLost, InferenceFailed, SandboxFailed, EvalPodFailed)."""


@dataclass(frozen=True)
class BatchProgress:
    batch: str
    members: tuple[MemberState, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return len(self.members)

    @property
    def phases(self) -> dict[str, int]:
        """Members per phase name, e.g. {"Running": 3, "Succeeded": 5}."""
        return dict(Counter(m.phase.value for m in self.members))

    @property
    def finished(self) -> int:
        return sum(1 for m in self.members if m.phase.is_terminal)

    @property
    def failed(self) -> int:
        """Members whose trainer status is failed (the same rule as the client's records)."""
        return sum(1 for m in self.members if m.status is TrainerStatus.FAILED)

    @property
    def statuses(self) -> dict[str, int]:
        """Finished members per trainer status, e.g. {"completed": 4, "failed": 1}."""
        return dict(Counter(m.status.value for m in self.members if m.phase.is_terminal))

    @property
    def done(self) -> bool:
        """Every member reached Succeeded or Failed."""
        return bool(self.members) and self.finished == self.total

    @property
    def suspended(self) -> int:
        """Unfinished members that are suspended (by their own flag or their batch's)."""
        return sum(1 for m in self.members if m.suspend and not m.phase.is_terminal)

    @property
    def queued(self) -> int:
        """Members waiting for capacity (phase Queued: quota, no node, Kueue's admission)."""
        return sum(1 for m in self.members if m.phase is Phase.QUEUED)

    @property
    def queued_by_reason(self) -> dict[str, int]:
        """Queued members per reason, e.g. {"QuotaExceeded": 2}."""
        return dict(Counter(m.queue_reason for m in self.members if m.phase is Phase.QUEUED))

    @property
    def retried(self) -> int:
        """Members that needed a retry (a lost pod, an infrastructure exit, a failed eval pod)."""
        return sum(1 for m in self.members if m.retries)

    @property
    def retry_reasons(self) -> dict[str, int]:
        """Retries per reason over the batch, e.g. {"PodLost": 2, "EvalPodFailed": 1}."""
        return dict(Counter(reason for m in self.members for reason in m.retries))

    @property
    def groups_complete(self) -> bool:
        """Every GRPO group finished whole: each member reached a terminal phase and none
        failed (a trainer drops a group with a hole). Members without a sample label
        count as groups of one."""
        return self.done and self.failed == 0

    @property
    def incomplete_groups(self) -> list[str]:
        """The groups (sample labels, or member names without one) that have a failed member."""
        return sorted({m.sample or m.name for m in self.members if m.status is TrainerStatus.FAILED})

    @property
    def generated_tokens(self) -> int:
        return sum(m.generated_tokens for m in self.members)

    @property
    def rewards(self) -> list[float]:
        return [m.reward for m in self.members if m.reward is not None]

    @property
    def resolved(self) -> int:
        return sum(1 for m in self.members if m.resolved)

    @classmethod
    def from_objects(
        cls, batch: str, objects: list[dict[str, Any]], batches: Mapping[str, SWERolloutBatchSpec] | None = None
    ) -> BatchProgress:
        """``batches``: the SWERolloutBatch specs by name (see :func:`member_state`)."""
        return cls(batch, tuple(member_state(o, batches) for o in sorted(objects, key=_sort_key)))


def _sort_key(obj: dict[str, Any]) -> tuple[int, ...] | tuple[str]:
    name = str((obj.get("metadata") or {}).get("name", ""))
    parts = name.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return (int(parts[1]), int(parts[2]))
    return (name,)


def member_state(obj: dict[str, Any], batches: Mapping[str, SWERolloutBatchSpec] | None = None) -> MemberState:
    """The member's state; ``batches`` (SWERolloutBatch specs by name, e.g. the client's
    ``batch_specs()``) decides whether its batch suspends it. Without them only the
    member's own flag is known."""
    status = parse_status(obj)
    meta = obj.get("metadata") or {}
    own = bool((obj.get("spec") or {}).get("suspend", False))
    owner = batch_name(meta.get("labels"))
    batch = (batches or {}).get(owner) if owner else None
    progress, result, reward = status.progress, status.result, status.reward
    generated = progress.generated_tokens if progress else 0
    if result is not None:
        generated = max(generated, result.response_tokens)
    return MemberState(
        name=str(meta.get("name", "")),
        phase=status.phase,
        turns=result.turns if result else (progress.turns if progress else 0),
        generated_tokens=generated,
        reward=reward.value if reward else None,
        resolved=reward.resolved if reward else None,
        exit_status=result.exit_status if result else None,
        suspend=is_suspended(own, batch),
        suspended_by=suspended_by(own, batch, owner),
        message=status.message,
        queue_reason=status.queue.reason.value if status.queue and status.queue.reason else "",
        sample=str((meta.get("labels") or {}).get(LABEL_SAMPLE, "")),
        attempts=status.attempts,
        retries=tuple(r.reason for r in status.retries),
        status=trainer_status(status.phase, result.exit_status if result else None, bool(reward and reward.graded)),
    )
