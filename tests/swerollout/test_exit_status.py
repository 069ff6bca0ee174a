"""Exit-status gating: which finished rollouts get evaluated, and which get reward 0 unevaluated."""

from __future__ import annotations

import pytest

from swerollout.api.v1alpha1 import Mode
from swerollout.exit_status import (
    ExitStatus,
    autosubmitted,
    gate_exit_status,
    is_infrastructure_failure,
    is_truncated,
    metric_label,
    produced_patch,
)

# exit status -> (evaluated in train, evaluated in validate, truncated)
TABLE = {
    "submitted": (True, True, False),
    # Autosubmissions: `submitted (<exit>)`, SWE-agent's spelling and the API docs'.
    "submitted (exit_context)": (False, True, True),
    "submitted (exit_cost)": (False, True, False),
    "submitted (exit_format)": (False, True, False),
    # The reversed spelling is not an autosubmission (nothing writes it).
    "exit_command_timeout (submitted)": (False, False, False),
    "exit_context (submitted)": (False, False, False),
    "exit_context": (False, False, True),
    "exit_format": (False, False, False),
    "exit_command_timeout": (False, False, False),
    "exit_total_execution_time": (False, False, False),
    "exit_max_iter_out": (False, False, False),
    "exit_environment_error": (False, False, False),
    "exit_api": (False, False, False),
    "exit_error": (False, False, False),
    # Look-alikes that are not submissions.
    "submittedx": (False, False, False),
    "not submitted": (False, False, False),
    "": (False, False, False),
}


@pytest.mark.parametrize("exit_status", list(TABLE))
def test_gating_table(exit_status: str) -> None:
    train_eval, validate_eval, truncated = TABLE[exit_status]
    for mode, expected in ((Mode.TRAIN, train_eval), (Mode.VALIDATE, validate_eval)):
        decision = gate_exit_status(exit_status, mode)
        assert decision.evaluate is expected, (exit_status, mode)
        assert decision.truncated is truncated
        assert decision.keep, "ungraded samples stay in the batch (GRPO group sizes stay whole)"
        assert decision.reason


def test_reason_names_the_status() -> None:
    decision = gate_exit_status("exit_max_iter_out", Mode.VALIDATE)
    assert "exit_max_iter_out" in decision.reason and "reward 0" in decision.reason
    assert "train mode" in gate_exit_status("submitted (exit_cost)", Mode.TRAIN).reason


@pytest.mark.parametrize("status", list(ExitStatus))
def test_autosubmission_round_trips_through_every_rule(status: ExitStatus) -> None:
    auto = autosubmitted(status)
    assert produced_patch(auto)
    assert metric_label(auto) == metric_label(status.value) == status.value
    assert is_truncated(auto) is is_truncated(status.value) is (status is ExitStatus.EXIT_CONTEXT)
    assert is_infrastructure_failure(auto) is is_infrastructure_failure(status.value)


def test_infrastructure_failures_and_closed_labels() -> None:
    assert is_infrastructure_failure(None) and is_infrastructure_failure("  ")
    assert is_infrastructure_failure("exit_api") and is_infrastructure_failure("submitted (exit_environment_error)")
    assert not is_infrastructure_failure("exit_format") and not is_infrastructure_failure("submitted")
    assert metric_label("exit_made_up") == "other" and metric_label("submitted (whatever)") == "other"
