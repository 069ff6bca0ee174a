"""What a runner should be doing, as a pure function of the rollout and the pod asking.

The answer is level-triggered: it depends only on the rollout's spec and status and
on which pod asks (role and attempt), never on what was answered before, so a
runner that reconnects — or an operator that restarted — gets the same answer.
Assignment ids change exactly when the work changes; a runner acts once per id.
"""

from __future__ import annotations

from typing import Any

from swerollout.api.v1alpha1 import Phase
from swerollout.wire.ingest import Assignment, AssignmentKind, ObjectKind, StoredObjectRef


def _ref(kind: ObjectKind, ref: dict[str, Any] | None) -> StoredObjectRef | None:
    if not ref:
        return None
    return StoredObjectRef(kind=kind, sha256=ref["sha256"], bytes=ref["bytes"], ref=ref["ref"])


def assignment_for(body: dict[str, Any], *, role: str, attempt: int) -> Assignment:
    spec = body.get("spec") or {}
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
        if phase in (Phase.EVALUATING,):
            return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)
        return Assignment(id="stop", kind=AssignmentKind.STOP, attempt=attempt)

    if attempt < current_attempt or phase.is_terminal or phase == Phase.EVALUATING:
        return Assignment(id="stop", kind=AssignmentKind.STOP, attempt=attempt)
    if attempt > current_attempt:
        # A pod from the future cannot exist; wait for the status to catch up.
        return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)

    partial = status.get("partial") or {}
    suspend = bool(spec.get("suspend"))
    if phase in (Phase.PENDING, Phase.STARTING):
        return Assignment(id="wait", kind=AssignmentKind.WAIT, attempt=attempt)
    if phase == Phase.RUNNING:
        if suspend:
            return Assignment(id=f"abort:{attempt}:{generation}", kind=AssignmentKind.ABORT, attempt=attempt)
        if partial:
            # Running again after a resume: keep answering the resume it picked up.
            return _resume(spec, partial, attempt, replay=bool(status.get("replay")))
        return Assignment(id=f"run:{attempt}", kind=AssignmentKind.RUN, attempt=attempt, spec=spec)
    if phase == Phase.RESUMING:
        if suspend:
            return Assignment(id=f"abort:{attempt}:{generation}", kind=AssignmentKind.ABORT, attempt=attempt)
        return _resume(spec, partial, attempt, replay=bool(status.get("replay")))
    # Aborted: keep the sandbox, do nothing until resumed.
    return Assignment(id=f"wait:aborted:{partial.get('abortedAt', '')}", kind=AssignmentKind.WAIT, attempt=attempt)


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
