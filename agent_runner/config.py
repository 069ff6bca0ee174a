"""The agent's configuration: prompt templates, tools, limits (SWE-agent style).

Defaults live in agent_runner/templates/default.yaml (function calling) and
textbash.yaml (one fenced bash block per turn). A SWERollout's `spec.agent`
overlays them through `AgentConfig.from_spec`.

Templates are Jinja with StrictUndefined, and every template is checked at load
time against the variables it will be given, so a typo fails when the config is
loaded, not twenty turns into a rollout.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swerollout.api import v1alpha1

TEMPLATES_DIR = Path(__file__).parent / "templates"

_JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


class ConfigError(ValueError):
    """The agent configuration is invalid (bad YAML, unknown key, template using an unknown variable)."""


# Variables every template sees (from the task), plus each template's own.
TASK_VARIABLES = frozenset({"problem_statement", "working_dir", "repo", "instance_id", "base_commit"})
TEMPLATE_VARIABLES: dict[str, frozenset[str]] = {
    "system_template": frozenset(),
    "instance_template": frozenset(),
    "next_step_template": frozenset({"observation", "exit_code"}),
    "next_step_no_output_template": frozenset({"exit_code"}),
    "truncated_observation_template": frozenset({"observation", "elided_chars", "max_observation_chars"}),
    "format_error_template": frozenset({"error"}),
    "blocklist_error_template": frozenset({"action"}),
    "command_timeout_template": frozenset({"command", "timeout"}),
}


class ActionFormat(str, Enum):
    FUNCTION_CALLING = "function_calling"
    """Tools as OpenAI function schemas; one tool call per turn."""
    TEXT_BASH = "text_bash"
    """Exactly one ```bash fenced block per turn; `submit` is a bash command."""


class TemplatesConfig(BaseModel):
    """Prompt templates (Jinja, strict: an undefined variable is an error)."""

    model_config = ConfigDict(extra="forbid")

    system_template: str
    """System message."""
    instance_template: str
    """First user message: the task."""
    next_step_template: str
    """Wraps a command's output; sees `observation`, `exit_code`."""
    next_step_no_output_template: str
    """Used instead when a command printed nothing; sees `exit_code`."""
    truncated_observation_template: str
    """Used when output exceeds max_observation_chars; `observation` is the kept head."""
    format_error_template: str
    """Sent back when a reply has no usable action; sees `error`."""
    blocklist_error_template: str
    """Sent back (as a format error) for a blocked command; sees `action`."""
    command_timeout_template: str
    """Observation of a command interrupted by the timeout; sees `command`, `timeout`."""

    @model_validator(mode="after")
    def _check_variables(self) -> TemplatesConfig:
        for name, allowed in TEMPLATE_VARIABLES.items():
            source = getattr(self, name)
            try:
                used = jinja2.meta.find_undeclared_variables(_JINJA.parse(source))
            except jinja2.TemplateSyntaxError as exc:
                raise ValueError(f"{name}: Jinja syntax error on line {exc.lineno}: {exc.message}") from exc
            unknown = sorted(used - allowed - TASK_VARIABLES)
            if unknown:
                known = ", ".join(sorted(allowed | TASK_VARIABLES))
                raise ValueError(f"{name} uses unknown variable(s) {unknown}; available: {known}")
        return self


class ToolsConfig(BaseModel):
    """What the model can do and how its actions are read."""

    model_config = ConfigDict(extra="forbid")

    action_format: ActionFormat = ActionFormat.FUNCTION_CALLING
    enabled: list[v1alpha1.ToolName] = Field(
        default_factory=lambda: [v1alpha1.ToolName.BASH, v1alpha1.ToolName.STR_REPLACE_EDITOR, v1alpha1.ToolName.SUBMIT]
    )
    """Tools offered (function calling). The text format always has bash and submit."""
    blocklist: list[str] = Field(default_factory=list)
    """A command is refused if it is one of these or starts with one followed by a space."""
    blocklist_standalone: list[str] = Field(default_factory=list)
    """A command is refused if it is exactly one of these (e.g. a bare `python` REPL)."""
    max_observation_chars: int = Field(default=10_000, ge=100)
    """Longer observations are cut to this many characters (the head is kept)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Exported in the shell before the first command (pagers off, progress bars off)."""

    @model_validator(mode="after")
    def _submit_is_available(self) -> ToolsConfig:
        if v1alpha1.ToolName.SUBMIT not in self.enabled:
            raise ValueError("tools.enabled must include 'submit', or the agent can never finish")
        return self


class LimitsConfig(BaseModel):
    """When a run stops without a submission."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=50, ge=1)
    """Model calls (requeries included) before exit_max_iter_out."""
    max_requeries: int = Field(default=3, ge=0)
    """Consecutive unusable replies answered with an error message; one more ends with exit_format."""
    command_timeout: float = Field(default=120.0, gt=0)
    """Seconds one command may run before it is interrupted (the model sees a timeout message)."""
    max_consecutive_timeouts: int = Field(default=3, ge=1)
    """This many timeouts in a row end the run with exit_command_timeout (SWE-agent's default is 3)."""
    total_execution_time: float = Field(default=1800.0, gt=0)
    """Summed seconds of command execution before exit_total_execution_time (model time not counted)."""
    max_context_tokens: int | None = Field(default=None, ge=1)
    """The model enforces it; the loop only reads it to tell a full context from a long reply."""


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    templates: TemplatesConfig
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)

    @classmethod
    def from_yaml(cls, path: str | Path) -> AgentConfig:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read agent config {path}: {exc}") from exc
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "agent config") -> AgentConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source} is invalid:\n{exc}") from exc

    @classmethod
    def default(cls, kind: v1alpha1.AgentKind = v1alpha1.AgentKind.RL_TOKEN_AGENT) -> AgentConfig:
        """The built-in config for an agent kind (TextBashAgent gets the fenced-bash format)."""
        name = "textbash.yaml" if kind == v1alpha1.AgentKind.TEXT_BASH_AGENT else "default.yaml"
        return _load_builtin(name).model_copy(deep=True)

    @classmethod
    def from_spec(cls, agent: v1alpha1.Agent, *, max_context_tokens: int | None = None) -> AgentConfig:
        """Overlay a SWERollout's `spec.agent` (and `spec.inference.maxContextTokens`) on the defaults."""
        base = cls.default(agent.kind)
        templates = base.templates.model_dump()
        templates.update(agent.templates.model_dump(exclude_none=True))
        tools = base.tools.model_dump()
        if base.tools.action_format == ActionFormat.FUNCTION_CALLING:
            tools["enabled"] = list(agent.tools.enabled)
        tools["blocklist"] = list(agent.tools.blocklist)
        tools["max_observation_chars"] = agent.tools.max_observation_chars
        limits = base.limits.model_dump()
        limits.update(
            max_turns=agent.max_turns,
            max_requeries=agent.max_requeries,
            command_timeout=float(agent.command_timeout_seconds),
            total_execution_time=float(agent.total_execution_timeout_seconds),
            max_context_tokens=max_context_tokens,
        )
        return cls.from_dict({"templates": templates, "tools": tools, "limits": limits}, source="spec.agent")

    def render(self, template_name: str, variables: dict[str, Any]) -> str:
        """Render one template strictly; an undefined variable raises ConfigError naming it."""
        source = getattr(self.templates, template_name)
        try:
            return _compile(source).render(**variables)
        except jinja2.TemplateError as exc:
            raise ConfigError(f"rendering {template_name}: {exc}") from exc


@lru_cache(maxsize=256)
def _compile(source: str) -> jinja2.Template:
    return _JINJA.from_string(source)


@lru_cache(maxsize=4)
def _load_builtin(name: str) -> AgentConfig:
    return AgentConfig.from_yaml(TEMPLATES_DIR / name)
