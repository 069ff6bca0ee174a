"""What a runner should be doing, as a pure function of the rollout and the pod asking.

The answer is level-triggered: it depends only on the rollout's spec and status and
on which pod asks (role and attempt), never on what was answered before, so a
runner that reconnects — or an operator that restarted — gets the same answer.
Assignment ids change exactly when the work changes; a runner acts once per id.

Decisions read the typed spec and status (the API models); the spec a runner is sent
is the stored one, as the API server holds it (`Tracked.wire_spec`), with the batch's
weight version when it sets one.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase, SWERolloutBatchSpec, is_suspended, weight_version
from swerollout.wire.ingest import (
    Abort,
    Assignment,
    Eval,
    ObjectKind,
    Prepare,
    Resume,
    Run,
    Stop,
    StoredObjectRef,
    Wait,
)

from .cache import Tracked


def _ref(kind: ObjectKind, ref: api.ObjectRef) -> StoredObjectRef:
    return StoredObjectRef(kind=kind, sha256=ref.sha256, bytes=ref.bytes, ref=ref.ref)


def assignment_for(
    entry: Tracked,
    *,
    role: str,
    attempt: int,
    batch: SWERolloutBatchSpec | None = None,
    batch_generation: int = 0,
) -> Assignment:
    """`batch`: the spec of the rollout's SWERolloutBatch, if it has one (and its generation)."""
    try:
        spec = entry.rollout_spec
    except ValidationError:
        # Its next pass fails the rollout InvalidSpec (and its runner is told to stop then).
        return Wait(id="wait:invalid", attempt=attempt)
    status = entry.rollout_status
    wire_spec = _with_batch(entry.wire_spec, spec, batch)
    phase = status.phase
    current_attempt = status.attempts or 1
    generation = entry.generation or 1

    if role == "eval":
        evaluation = status.evaluation or api.EvaluationState()
        result = status.result
        if phase == Phase.EVALUATING and evaluation.attempt == attempt and result is not None and result.patch:
            return Eval(
                id=f"eval:{attempt}",
                attempt=attempt,
                spec=wire_spec,
                patch=_ref(ObjectKind.PATCH, result.patch),
                exit_status=result.exit_status,
            )
        if phase == Phase.EVALUATING:
            # Another attempt's pod (or, never with the phase machine's FINISHED, no patch).
            return Wait(id="wait", attempt=attempt)
        if not phase.is_terminal and spec.reward.prewarm:
            # A prewarmed eval pod, ready before the patch: it waits for Evaluating.
            return Wait(id="wait", attempt=attempt)
        return Stop(id="stop", attempt=attempt)

    if attempt < current_attempt or phase.is_terminal or phase == Phase.EVALUATING:
        return Stop(id="stop", attempt=attempt)
    if attempt > current_attempt:
        # A pod from the future cannot exist; wait for the status to catch up.
        return Wait(id="wait", attempt=attempt)

    partial = status.partial
    reclaimed = status.sandbox is not None and status.sandbox.reclaimed_at is not None
    suspend = is_suspended(spec.suspend, batch)
    # An abort's id changes with every new suspension, the rollout's own or its batch's
    # (a runner acts once per id, and a resumed run must hear the next abort).
    abort_id = f"abort:{attempt}:{generation}" + (
        f":b{batch_generation}" if batch is not None and batch.suspend else ""
    )
    if phase in (Phase.PENDING, Phase.QUEUED, Phase.STARTING):
        return Wait(id="wait", attempt=attempt)
    if phase == Phase.PREPARED:
        if reclaimed:
            # Released: this pod is going; the pass starts a fresh one on the resume.
            return Stop(id="stop", attempt=attempt)
        if suspend:
            return Prepare(id=f"prepare:{attempt}", attempt=attempt, spec=wire_spec)
        # The go, answered in memory as the resume arrives (before the pass that records
        # Running), with the id Running answers, so the runner acts on it once.
        return Run(id=f"run:{attempt}", attempt=attempt, spec=wire_spec)
    if phase == Phase.RUNNING:
        if suspend:
            return Abort(id=abort_id, attempt=attempt)
        if partial is not None or status.replay:
            # Running again after a resume or a replay: keep answering the resume it picked up.
            return _resume(wire_spec, partial, attempt, replay=status.replay)
        return Run(id=f"run:{attempt}", attempt=attempt, spec=wire_spec)
    if phase == Phase.RESUMING:
        if suspend:
            return Abort(id=abort_id, attempt=attempt)
        return _resume(wire_spec, partial, attempt, replay=status.replay)
    # Aborted and no longer suspended (a resume, of the batch or the rollout): the runner on
    # the live pod resumes at once, answered in memory like an abort, before the pass that
    # records Resuming; the resume's id is the one Resuming answers, so it is acted on once.
    # A reclaimed pod has no runner to tell: the pass replays into a fresh one.
    if not suspend and partial is not None and not reclaimed:
        return _resume(wire_spec, partial, attempt, replay=status.replay)
    # Aborted: keep the sandbox, do nothing until resumed.
    return Wait(id=f"wait:aborted:{_stamp(partial)}", attempt=attempt)


def _stamp(partial: api.Partial | None) -> str:
    """partial.abortedAt as the operator writes it (the ids name it)."""
    if partial is None:
        return ""
    return partial.aborted_at.isoformat().replace("+00:00", "Z")


def _with_batch(wire: dict[str, Any], spec: api.SWERolloutSpec, batch: SWERolloutBatchSpec | None) -> dict[str, Any]:
    """The spec a runner works to: the batch's weight version, when it sets one, wins."""
    own = spec.inference.weight_version
    version = weight_version(own, batch)
    if version == own:
        return wire
    return {**wire, "inference": {**(wire.get("inference") or {}), "weightVersion": version}}


def _resume(spec: dict[str, Any], partial: api.Partial | None, attempt: int, *, replay: bool) -> Run | Resume:
    """A resume from the snapshot; with none (a pod lost before its first checkpoint), a run
    from the start in the fresh pod, under the id a resume has."""
    at = f"resume:{attempt}:{_stamp(partial)}"
    if partial is None:
        return Run(id=at, attempt=attempt, spec=spec, replay=replay)
    return Resume(
        id=at, attempt=attempt, spec=spec, snapshot=_ref(ObjectKind.SNAPSHOT, partial.snapshot), replay=replay
    )
