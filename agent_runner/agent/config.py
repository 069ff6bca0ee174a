"""The agent's configuration as the loop uses it, built from a SWERollout's `spec.agent`.

Every default (templates, blocklists, shell environment, limits) lives in the API
model (swerollout.api.v1alpha1.Agent and swerollout.api.prompts); this module only
reshapes a validated `spec.agent` for the loop and renders templates. Templates are
Jinja with StrictUndefined, checked by the API model when the spec is validated.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerollout.api import v1alpha1
from swerollout.api.prompts import JINJA, ActionFormat, check_template

__all__ = ["ActionFormat", "AgentConfig", "AgentConfigError", "LimitsConfig", "TemplatesConfig", "ToolsConfig"]


class AgentConfigError(ValueError):
    """The agent configuration is invalid (a template using an unknown variable, a bad limit)."""


class TemplatesConfig(BaseModel):
    """Every prompt template, resolved (see v1alpha1.Templates for what each one sees)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_template: str
    instance_template: str
    next_step_template: str
    next_step_no_output_template: str
    truncated_observation_template: str
    format_error_template: str
    blocklist_error_template: str
    command_timeout_template: str


class ToolsConfig(BaseModel):
    """What the model can do and how its actions are read."""

    model_config = ConfigDict(extra="forbid")

    action_format: ActionFormat
    enabled: list[v1alpha1.ToolName]
    """Tools offered (function calling). The text format always has bash and submit."""
    blocklist: list[str]
    """A command is refused if it is one of these or starts with one followed by a space."""
    blocklist_standalone: list[str]
    """A command is refused if it is exactly one of these (e.g. a bare `python` REPL)."""
    max_observation_chars: int = Field(ge=1)
    """Longer observations are cut to this many characters (the head is kept)."""
    env: dict[str, str]
    """Exported in the shell before the first command."""


class LimitsConfig(BaseModel):
    """When a run stops without a submission."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(ge=1)
    """Model calls (requeries included) before exit_max_iter_out."""
    max_requeries: int = Field(ge=0)
    """Consecutive unusable replies answered with an error message; one more ends with exit_format."""
    command_timeout: float = Field(gt=0)
    """Seconds one command may run before it is interrupted (the model sees a timeout message)."""
    max_consecutive_timeouts: int = Field(ge=1)
    """This many timeouts in a row end the run with exit_command_timeout."""
    total_execution_time: float = Field(gt=0)
    """Summed seconds of command execution before exit_total_execution_time (model time not counted)."""
    max_context_tokens: int | None = Field(default=None, ge=1)
    """The model enforces it; the loop only reads it to tell a full context from a long reply."""


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    templates: TemplatesConfig
    tools: ToolsConfig
    limits: LimitsConfig

    @classmethod
    def default(cls, kind: v1alpha1.AgentKind = v1alpha1.AgentKind.RL_TOKEN_AGENT) -> AgentConfig:
        """The configuration of an agent kind with every default of the API model."""
        return cls.from_spec(v1alpha1.Agent(kind=kind))

    @classmethod
    def from_spec(cls, agent: v1alpha1.Agent | dict[str, Any], *, max_context_tokens: int | None = None) -> AgentConfig:
        """The loop's view of `spec.agent` (and `spec.inference.maxContextTokens`).

        Raises AgentConfigError naming the field when `agent` is not valid, the same check the
        client and the operator ran on the same model.
        """
        try:
            spec = agent if isinstance(agent, v1alpha1.Agent) else v1alpha1.Agent.model_validate(agent)
        except ValidationError as exc:
            raise AgentConfigError(f"spec.agent is invalid: {_first_error(exc)}") from exc
        action_format = spec.action_format
        enabled = list(spec.tools.enabled)
        if action_format == ActionFormat.TEXT_BASH:
            enabled = [v1alpha1.ToolName.BASH, v1alpha1.ToolName.SUBMIT]
        return cls(
            templates=TemplatesConfig(**spec.templates.resolved(action_format)),
            tools=ToolsConfig(
                action_format=action_format,
                enabled=enabled,
                blocklist=list(spec.tools.blocklist),
                blocklist_standalone=list(spec.tools.blocklist_standalone),
                max_observation_chars=spec.tools.max_observation_chars,
                env=dict(spec.tools.env),
            ),
            limits=LimitsConfig(
                max_turns=spec.max_turns,
                max_requeries=spec.max_requeries,
                command_timeout=float(spec.command_timeout_seconds),
                max_consecutive_timeouts=spec.max_consecutive_timeouts,
                total_execution_time=float(spec.total_execution_timeout_seconds),
                max_context_tokens=max_context_tokens,
            ),
        )

    def with_template(self, name: str, source: str) -> AgentConfig:
        """A copy with one template replaced, checked like spec.agent.templates (AgentConfigError if bad)."""
        try:
            check_template(name, source)
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from exc
        return self.model_copy(update={"templates": self.templates.model_copy(update={name: source})})

    def render(self, template_name: str, variables: dict[str, Any]) -> str:
        """Render one template strictly; an undefined variable raises AgentConfigError naming it."""
        source = getattr(self.templates, template_name)
        try:
            return _compile(source).render(**variables)
        except jinja2.TemplateError as exc:
            raise AgentConfigError(f"rendering {template_name}: {exc}") from exc


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


@lru_cache(maxsize=256)
def _compile(source: str) -> jinja2.Template:
    return JINJA.from_string(source)
