"""Who is suspended: the one rule, for the operator (what a runner is told, when an
Aborted rollout resumes) and the client (what abort/resume must write).

A rollout is suspended while its own `spec.suspend` OR its batch's is true. Both are
written only by users, so the last write wins whatever order the writes and the
runner's reports land in: the operator derives everything from the current values.
A rollout with no batch object (or no batch label) follows its own flag alone, as
before SWERolloutBatch existed.
"""

from __future__ import annotations

from collections.abc import Mapping

from .v1alpha1 import LABEL_BATCH, SWERolloutBatchSpec


def batch_name(labels: Mapping[str, str] | None) -> str | None:
    """The batch a rollout belongs to (its `swerollout.io/batch` label), if any."""
    return (labels or {}).get(LABEL_BATCH) or None


def is_suspended(own: bool, batch: SWERolloutBatchSpec | None) -> bool:
    return own or (batch is not None and batch.suspend)


def suspended_by(own: bool, batch: SWERolloutBatchSpec | None, batch_name: str | None = None) -> str:
    """Who suspends the rollout, for what users read (`swerollout list/get/watch`):
    'spec.suspend', 'batch <name>', both joined by ' and ', or '' when nobody does."""
    who = ["spec.suspend"] if own else []
    if batch is not None and batch.suspend:
        who.append(f"batch {batch_name}" if batch_name else "its SWERolloutBatch")
    return " and ".join(who)


def weight_version(own: str | None, batch: SWERolloutBatchSpec | None) -> str | None:
    """The weight version a run labels its tokens with where the server reports none:
    the batch's when it sets one (it is written with the resume after a weight update)."""
    if batch is not None and batch.weight_version:
        return batch.weight_version
    return own
