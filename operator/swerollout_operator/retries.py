"""What the operator retries, and from where: the one home of the failure-retry policy.

Retried (a fresh pod replays from the last per-turn checkpoint, `spec.sandbox.maxAttempts`
pods in all): a pod or node lost while Running; a run the infrastructure ended with nothing
graded (`exit_api`, `exit_environment_error`, also when its autosubmitted patch could not be
graded either, reported by the eval pod). An eval pod that failed for infrastructure
reasons (deleted, evicted, killed) is re-run within the same bound. Never retried: the
policy's own outcomes (`exit_format`, `exit_context`, a wrong patch: a test failure is a
result), and `exit_error` (a runner bug would only fail again).

The phase change itself is the phase machine's (phases.Trigger.RETRY); this module says
whether it applies and what the partial status it writes carries.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from swerollout.api import v1alpha1 as api
from swerollout.exit_status import ExitStatus, base_exit, is_failed_run

if TYPE_CHECKING:
    from .cache import Tracked

RETRIED_EXITS = frozenset({ExitStatus.EXIT_API.value, ExitStatus.EXIT_ENVIRONMENT_ERROR.value})
"""Exits of the infrastructure that a fresh pod may not meet again."""
MAX_RECORDED = 32
"""status.retries keeps the newest this many."""


def is_retried_exit(exit_status: str, graded: bool) -> bool:
    """A finished run to replay rather than fail: an infrastructure exit with nothing graded."""
    return is_failed_run(exit_status, graded) and base_exit(exit_status) in RETRIED_EXITS


def attempts_left(entry: Tracked) -> bool:
    """Whether another rollout pod may be started (spec.sandbox.maxAttempts)."""
    return max(1, entry.rollout_status.attempts) < entry.rollout_spec.sandbox.max_attempts


def eval_attempts_left(entry: Tracked, attempt: int) -> bool:
    return attempt < entry.rollout_spec.sandbox.max_attempts


EVAL_RETRY = "EvalPodFailed"
"""The reason of an eval pod re-run's record (its attempt counts eval pods, not rollout pods)."""


def superseded(status: api.SWERolloutStatus, attempt: int) -> bool:
    """Whether rollout attempt ``attempt`` was replaced by a retry: a later pod was started,
    or the retry that will start one is written (its record names the attempt it ended)."""
    if attempt < max(1, status.attempts):
        return True
    return any(r.attempt >= attempt for r in status.retries if r.reason != EVAL_RETRY)


def next_evaluation(status: api.SWERolloutStatus) -> api.EvaluationState:
    """The evaluation a finished run starts: eval attempt 1, or one past the eval pods an
    earlier attempt used (its autosubmission could not be graded and it was replayed), so
    no eval pod name is reused; the old pod's name and start are cleared."""
    earlier = status.evaluation
    attempt = earlier.attempt + 1 if earlier is not None and earlier.pod_name else 1
    return api.EvaluationState(attempt=attempt, pod_name=None, started_at=None)


def latest_checkpoint(entry: Tracked) -> api.Checkpoint | None:
    """The newest checkpoint of the current attempt's chain: the runner's last report
    (in memory, possibly not yet written) or the status, whichever covers more turns.
    A report of an older attempt is ignored (its pod may still run, on another branch)."""
    status = entry.rollout_status
    recorded = status.checkpoint
    attempt = max(1, status.attempts)
    report = entry.progress.checkpoint if entry.progress is not None else None
    if report is None or report.attempt < attempt:
        return recorded
    reported = to_status(report)
    if recorded is None or reported.turns >= recorded.turns:
        return reported
    return recorded


def to_status(report: Any) -> api.Checkpoint:
    """A runner's wire.CheckpointReport as the status records it."""
    head = report.head
    return api.Checkpoint(
        snapshot=api.ObjectRef(ref=head.ref, sha256=head.sha256, bytes=head.bytes),
        attempt=report.attempt,
        segments=report.segments,
        bytes=report.chain_bytes,
        turns=report.turns,
        tokens=report.context_tokens,
        sampled_tokens=report.sampled_tokens,
    )


def replay_status(entry: Tracked, reason: str, at: datetime) -> tuple[api.SWERolloutStatus, int]:
    """The partial status a RETRY writes: the checkpoint to resume from as `partial` (an
    older abort's partial stays when no checkpoint is newer), the replay flag, the old pod
    marked gone (the next pass starts the next attempt's pod), the retry recorded.
    Returns it and the turns the replay starts from."""
    status = entry.rollout_status
    checkpoint = latest_checkpoint(entry)
    out = api.SWERolloutStatus(replay=True, sandbox=api.SandboxHandle(reclaimed_at=at))
    if status.result is not None:
        # A retried run records no result (an ungradeable autosubmission had written one).
        out.result = None
    turns = status.partial.turns if status.partial is not None else 0
    if checkpoint is not None and (status.partial is None or checkpoint.turns >= status.partial.turns):
        out.partial = api.Partial(
            snapshot=checkpoint.snapshot,
            turns=checkpoint.turns,
            tokens=checkpoint.tokens,
            aborted_at=at,
            reason=reason,
        )
        out.checkpoint = checkpoint
        turns = checkpoint.turns
    record = api.Retry(attempt=max(1, status.attempts), reason=reason, turns=turns, at=at)
    out.retries = [*status.retries, record][-MAX_RECORDED:]
    return out, turns


def record(entry: Tracked, reason: str, at: datetime, *, attempt: int) -> list[api.Retry]:
    """status.retries with one more entry (an eval pod re-run)."""
    return [*entry.rollout_status.retries, api.Retry(attempt=attempt, reason=reason, at=at)][-MAX_RECORDED:]
