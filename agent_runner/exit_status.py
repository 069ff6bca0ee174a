"""How an agent run ended: SWE-agent's exit-status taxonomy.

Autosubmission follows SWE-agent (sweagent/agent/agents.py,
`attempt_autosubmission_after_error`): after an error exit the runner still
captures the working tree's diff, and when that diff is non-empty the status
becomes ``submitted (<exit status>)``, e.g. ``submitted (exit_format)``. An
empty diff leaves the bare status. So "was a patch produced" is always
``status.startswith("submitted")``; validate mode grades those, train mode
grades only a plain ``submitted``.
"""

from __future__ import annotations

from enum import Enum


class ExitStatus(str, Enum):
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


def autosubmitted(status: ExitStatus) -> str:
    """The status string of an error exit whose diff was recovered and submitted."""
    return f"{ExitStatus.SUBMITTED.value} ({status.value})"


def produced_patch(status: str) -> bool:
    """True for `submitted` and every `submitted (...)` (graded in validate mode)."""
    return status == ExitStatus.SUBMITTED.value or status.startswith(f"{ExitStatus.SUBMITTED.value} (")


def is_truncated(status: str) -> bool:
    """True when the run stopped because the context was full (trainer marks the sample truncated)."""
    return ExitStatus.EXIT_CONTEXT.value in status
