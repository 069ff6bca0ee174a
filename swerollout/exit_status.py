"""How a rollout's agent run ended, and what that means for grading and training.

One home for these rules: the runner (which writes the status), the operator (which
gates evaluation and labels metrics) and the client (which tells the trainer) all
import them from here; none of them may import another.

The taxonomy is SWE-agent's. After an error exit the runner still captures the
working tree's diff; when it is non-empty the status becomes ``submitted (<exit>)``,
e.g. ``submitted (exit_format)`` (an *autosubmission*). That is the only
autosubmission format, and the one the API docs describe.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from swerollout.api.v1alpha1 import Mode

__all__ = [
    "INFRASTRUCTURE_EXITS",
    "ExitStatus",
    "GateDecision",
    "autosubmitted",
    "base_exit",
    "gate_exit_status",
    "is_autosubmission",
    "is_failed_run",
    "is_infrastructure_failure",
    "is_truncated",
    "metric_label",
    "produced_patch",
]


class ExitStatus(StrEnum):
    SUBMITTED = "submitted"
    """The agent called submit."""
    EXIT_CONTEXT = "exit_context"
    """The context budget ran out (the trajectory is truncated)."""
    EXIT_FORMAT = "exit_format"
    """More consecutive unusable replies (no/bad action, blocked command) than max_requeries."""
    EXIT_COMMAND_TIMEOUT = "exit_command_timeout"
    """Too many consecutive commands hit the per-command timeout."""
    EXIT_TOTAL_EXECUTION_TIME = "exit_total_execution_time"
    """The summed execution time of all commands passed its limit."""
    EXIT_MAX_ITER_OUT = "exit_max_iter_out"
    """The model-call limit (max_turns) was reached."""
    EXIT_ENVIRONMENT_ERROR = "exit_environment_error"
    """The sandbox died or became unreachable."""
    EXIT_API = "exit_api"
    """The model API kept failing after its own retries."""
    EXIT_ERROR = "exit_error"
    """Anything else (a bug, a broken template)."""


INFRASTRUCTURE_EXITS = frozenset({ExitStatus.EXIT_ENVIRONMENT_ERROR, ExitStatus.EXIT_API, ExitStatus.EXIT_ERROR})
"""Exits that say the infrastructure failed, not the policy: a trainer should not learn
from them as if the model had chosen to stop."""

_AUTO_PREFIX = f"{ExitStatus.SUBMITTED.value} ("


def autosubmitted(status: ExitStatus) -> str:
    """The status string of an error exit whose diff was recovered and submitted."""
    return f"{_AUTO_PREFIX}{status.value})"


def is_autosubmission(status: str) -> bool:
    """``submitted (exit_x)``: the run ended on an error but its diff was submitted."""
    status = status.strip()
    return status.startswith(_AUTO_PREFIX) and status.endswith(")")


def base_exit(status: str) -> str:
    """The exit behind a status: ``submitted (exit_format)`` -> ``exit_format``."""
    status = status.strip()
    return status[len(_AUTO_PREFIX) : -1] if is_autosubmission(status) else status


def produced_patch(status: str) -> bool:
    """True for ``submitted`` and every autosubmission (graded in validate mode)."""
    status = status.strip()
    return status == ExitStatus.SUBMITTED.value or is_autosubmission(status)


def is_truncated(status: str) -> bool:
    """The run stopped because the context was full, also when its diff was autosubmitted.
    The one rule for "truncated": the operator's status.result.truncated, the client's
    records and trainer statuses, and the trainer adapters all read it from here."""
    return base_exit(status) == ExitStatus.EXIT_CONTEXT.value


def is_infrastructure_failure(status: str | None) -> bool:
    """No status at all, or an exit that blames the infrastructure (also when autosubmitted)."""
    if not status or not status.strip():
        return True
    return base_exit(status) in {s.value for s in INFRASTRUCTURE_EXITS}


def is_failed_run(status: str | None, graded: bool) -> bool:
    """A finished run that failed: an infrastructure exit with no grade to show for it.

    The one rule behind the operator's phase (such a run ends Failed) and the trainer
    status of the client's records (`failed`); a graded autosubmission (validate mode)
    has a real reward and is not failed."""
    return is_infrastructure_failure(status) and not graded


def metric_label(status: str) -> str:
    """A closed label set for metrics: an autosubmission counts as its exit; unknown -> other."""
    base = base_exit(status)
    return base if base in {s.value for s in ExitStatus} else "other"


class GateDecision(BaseModel):
    """What happens to a finished rollout before any reward is computed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    evaluate: bool
    """Run the eval pod. False: reward 0 without evaluation."""
    keep: bool = True
    """Always true: ungraded samples stay in the batch so GRPO groups keep their size."""
    truncated: bool
    """The run ended on the context limit (exit_context), so its trajectory is cut short."""
    reason: str


def gate_exit_status(exit_status: str, mode: Mode) -> GateDecision:
    """Train grades only `submitted`; validate grades `submitted` and autosubmissions; others get 0."""
    status = exit_status.strip()
    truncated = is_truncated(status)
    if status == ExitStatus.SUBMITTED.value:
        return GateDecision(evaluate=True, truncated=truncated, reason="the agent submitted")
    if is_autosubmission(status):
        if mode is Mode.VALIDATE:
            return GateDecision(
                evaluate=True, truncated=truncated, reason=f"validate mode grades autosubmission {status!r}"
            )
        return GateDecision(
            evaluate=False,
            truncated=truncated,
            reason=f"train mode grades only 'submitted', not autosubmission {status!r}",
        )
    return GateDecision(evaluate=False, truncated=truncated, reason=f"exit status {status!r} is not graded; reward 0")
