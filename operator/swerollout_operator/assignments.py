"""What a runner should be doing, as a pure function of the rollout and the pod asking.

The answer is level-triggered: it depends only on the rollout's spec and status and
on which pod asks (role and attempt), never on what was answered before, so a
runner that reconnects — or an operator that restarted — gets the same answer.
Assignment ids change exactly when the work changes; a runner acts once per id.
"""

from __future__ import annotations

from typing import Any

from swerollout.api.suspension import is_suspended, weight_version
from swerollout.api.v1alpha1 import Phase, SWERolloutBatchSpec
from swerollout.wire.ingest import Assignment, AssignmentKind, ObjectKind, StoredObjectRef


def _ref(kind: ObjectKind, ref: dict[str, Any] | None) -> StoredObjectRef | None:
    if not ref:
        return None
    return StoredObjectRef(kind=kind, sha256=ref["sha256"], bytes=ref["bytes"], ref=ref["ref"])


def assignment_for(
    body: dict[str, Any],
    *,
    role: str,
    attempt: int,
    batch: SWERolloutBatchSpec | None = None,
    batch_generation: int = 0,
) -> Assignment:
    """`batch`: the spec of the rollout's SWERolloutBatch, if it has one (and its generation)."""
    spec = _with_batch(body.get("spec") or {}, batch)
    status = body.get("status") or {}
    phase = Phase(status.get("phase", Phase.PENDING.value))
    current_attempt = int(status.get("attempts") or 1)
    generation = int(body.get("metadata", {}).get("generation") or 1)

    if role == "eval":
        eval_state = status.get("evaluation") or {}
        if phase == Phase.EVALUATING and int(eval_state.get("attempt") or 1) == attempt:
            patch = _ref(ObjectKind.PATCH, (status.get("result") or {}).get("patch"))
            return Assignment(
                id=f"eval:{attempt}",
                kind=AssignmentKind.EVAL,
                attempt=attempt,
                spec=spec,
                patch=patch,
                exit_status=(status.get("result") or {}).get("exitStatus"),
            )
        if phase == Phase.EVALUATING:
            return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)
        if not phase.is_terminal and (spec.get("reward") or {}).get("prewarm"):
            # A prewarmed eval pod, ready before the patch: it waits for Evaluating.
            return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)
        return Assignment(id="stop", kind=AssignmentKind.STOP, attempt=attempt)

    if attempt < current_attempt or phase.is_terminal or phase == Phase.EVALUATING:
        return Assignment(id="stop", kind=AssignmentKind.STOP, attempt=attempt)
    if attempt > current_attempt:
        # A pod from the future cannot exist; wait for the status to catch up.
        return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)

    partial = status.get("partial") or {}
    suspend = is_suspended(bool(spec.get("suspend")), batch)
    # An abort's id changes with every new suspension, the rollout's own or its batch's
    # (a runner acts once per id, and a resumed run must hear the next abort).
    abort_id = f"abort:{attempt}:{generation}" + (
        f":b{batch_generation}" if batch is not None and batch.suspend else ""
    )
    if phase in (Phase.PENDING, Phase.QUEUED, Phase.STARTING):
        return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)
    if phase == Phase.PREPARED:
        if (status.get("sandbox") or {}).get("reclaimedAt"):
            # Released: this pod is going; the pass starts a fresh one on the resume.
            return Assignment(id="stop", kind=AssignmentKind.STOP, attempt=attempt)
        if suspend:
            return Assignment(id=f"prepare:{attempt}", kind=AssignmentKind.PREPARE, attempt=attempt, spec=spec)
        # The go, answered in memory as the resume arrives (before the pass that records
        # Running), with the id Running answers, so the runner acts on it once.
        return Assignment(id=f"run:{attempt}", kind=AssignmentKind.RUN, attempt=attempt, spec=spec)
    if phase == Phase.RUNNING:
        if suspend:
            return Assignment(id=abort_id, kind=AssignmentKind.ABORT, attempt=attempt)
        if partial or status.get("replay"):
            # Running again after a resume or a replay: keep answering the resume it picked up.
            return _resume(spec, partial, attempt, replay=bool(status.get("replay")))
        return Assignment(id=f"run:{attempt}", kind=AssignmentKind.RUN, attempt=attempt, spec=spec)
    if phase == Phase.RESUMING:
        if suspend:
            return Assignment(id=abort_id, kind=AssignmentKind.ABORT, attempt=attempt)
        return _resume(spec, partial, attempt, replay=bool(status.get("replay")))
    # Aborted and no longer suspended (a resume, of the batch or the rollout): the runner on
    # the live pod resumes at once, answered in memory like an abort, before the pass that
    # records Resuming; the resume's id is the one Resuming answers, so it is acted on once.
    # A reclaimed pod has no runner to tell: the pass replays into a fresh one.
    reclaimed = bool((status.get("sandbox") or {}).get("reclaimedAt"))
    if not suspend and partial and not reclaimed:
        return _resume(spec, partial, attempt, replay=bool(status.get("replay")))
    # Aborted: keep the sandbox, do nothing until resumed.
    return Assignment(id=f"wait:aborted:{partial.get('abortedAt', '')}", kind=AssignmentKind.WAIT, attempt=attempt)


def _with_batch(spec: dict[str, Any], batch: SWERolloutBatchSpec | None) -> dict[str, Any]:
    """The spec a runner works to: the batch's weight version, when it sets one, wins."""
    inference = spec.get("inference") or {}
    version = weight_version(inference.get("weightVersion"), batch)
    if version == inference.get("weightVersion"):
        return spec
    return {**spec, "inference": {**inference, "weightVersion": version}}


def _resume(spec: dict[str, Any], partial: dict[str, Any], attempt: int, *, replay: bool) -> Assignment:
    snapshot = _ref(ObjectKind.SNAPSHOT, partial.get("snapshot"))
    return Assignment(
        id=f"resume:{attempt}:{partial.get('abortedAt', '')}",
        kind=AssignmentKind.RESUME,
        attempt=attempt,
        spec=spec,
        snapshot=snapshot,
        replay=replay,
    )
