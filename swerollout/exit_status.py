"""Exit statuses of a finished rollout and the rule that decides which ones are graded.

One home for the rule: the operator (gating before evaluation), the runner (eval mode)
and the client (trainer status) import it from here; none of them may import another.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from swerollout.api.v1alpha1 import Mode

__all__ = ["EXIT_CONTEXT", "SUBMITTED", "GateDecision", "gate_exit_status"]


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


SUBMITTED = "submitted"
EXIT_CONTEXT = "exit_context"


def _is_autosubmission(exit_status: str) -> bool:
    # SWE-agent writes "submitted (exit_cost)"; our API docs describe "exit_x (submitted)".
    # Both mean "the run ended with an error but its diff was recovered and submitted".
    return exit_status.startswith(SUBMITTED + " ") or exit_status.endswith(f"({SUBMITTED})")


def gate_exit_status(exit_status: str, mode: Mode) -> GateDecision:
    """Train grades only `submitted`; validate grades `submitted` and autosubmissions; others get 0."""
    status = exit_status.strip()
    truncated = EXIT_CONTEXT in status
    if status == SUBMITTED:
        return GateDecision(evaluate=True, truncated=truncated, reason="the agent submitted")
    if _is_autosubmission(status):
        if mode is Mode.VALIDATE:
            return GateDecision(evaluate=True, truncated=truncated, reason=f"validate mode grades autosubmission {status!r}")
        return GateDecision(
            evaluate=False, truncated=truncated, reason=f"train mode grades only 'submitted', not autosubmission {status!r}"
        )
    return GateDecision(evaluate=False, truncated=truncated, reason=f"exit status {status!r} is not graded; reward 0")
