"""The agent loop's data: the task it sees, its resumable state, step reports and its result."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swerollout.api import v1alpha1
from swerollout.issue_images import links_text


class TaskInfo(BaseModel):
    """What the templates know about the task."""

    model_config = ConfigDict(extra="forbid")

    problem_statement: str
    working_dir: str
    base_commit: str
    repo: str = ""
    instance_id: str = ""
    issue_images: list[str] = Field(default_factory=list)
    """Images shown with the first user message, in order (not a template variable)."""

    @classmethod
    def from_instance(
        cls, instance: v1alpha1.Instance, mode: v1alpha1.IssueImageMode = v1alpha1.IssueImageMode.INLINE
    ) -> TaskInfo:
        """From a SWERollout's `spec.instance`; `mode` is `spec.agent.issueImageMode` (Links:
        the images become a text list at the end of the problem statement)."""
        links = mode == v1alpha1.IssueImageMode.LINKS and bool(instance.issue_images)
        return cls(
            problem_statement=(
                links_text(instance.problem_statement, instance.issue_images) if links else instance.problem_statement
            ),
            working_dir=instance.workdir,
            base_commit=instance.base_commit,
            repo=instance.repo,
            instance_id=instance.instance_id,
            issue_images=[] if links else list(instance.issue_images),
        )

    def template_variables(self) -> dict[str, Any]:
        return self.model_dump(exclude={"issue_images"})


class LoopState(BaseModel):
    """Everything needed to continue a run after an abort (goes into the snapshot)."""

    model_config = ConfigDict(extra="forbid")

    started: bool = False
    """System and instance messages were sent and the shell prepared."""
    turns: int = 0
    """Model calls that returned a turn (requeries included; aborted calls not)."""
    requeries: int = 0
    """Consecutive unusable replies."""
    consecutive_timeouts: int = 0
    execution_seconds: float = 0.0
    """Summed wall time of commands run in the sandbox."""
    editor_history: dict[str, list[str]] = Field(default_factory=dict)
    """str_replace_editor undo history: path -> previous contents."""


class StepInfo(BaseModel):
    """Reported to on_step at every step boundary (the runner persists progress with it)."""

    model_config = ConfigDict(extra="forbid")

    state: LoopState
    action: str | None
    """The command or tool call run this step; None for a requery."""
    observation: str
    """What the model was shown (after truncation)."""
    exit_code: int | None = None


class LoopResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partial: bool
    """True when the model aborted; `state` resumes it and exit_status is None."""
    exit_status: str | None
    submission: str | None
    """The diff against the base commit (None when it could not be read)."""
    state: LoopState
    error: str | None = None
    """Why an error exit happened."""
