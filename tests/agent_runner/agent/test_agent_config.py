"""Agent config: defaults from the API model, strict templates, spec.agent overlay, action parsing and the blocklist."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_runner.agent.config import ActionFormat, AgentConfig, AgentConfigError
from agent_runner.agent.tools import (
    BashAction,
    EditorAction,
    FormatError,
    SubmitAction,
    blocked_command,
    parse_text_action,
    parse_tool_call,
    tool_schemas,
)
from agent_runner.policy.model import ToolCall
from swerollout.api import v1alpha1
from swerollout.exit_status import ExitStatus, autosubmitted, is_truncated, produced_patch

TASK = {"problem_statement": "p", "working_dir": "/testbed", "repo": "r", "instance_id": "i", "base_commit": "abc"}


def test_builtin_configs_render_every_template() -> None:
    for kind in v1alpha1.AgentKind:
        config = AgentConfig.default(kind)
        rendered = config.render("instance_template", TASK)
        assert "/testbed" in rendered and "p" in rendered
        assert config.render("format_error_template", {**TASK, "error": "E"}).startswith(
            "Your reply could not be used: E"
        )
    assert AgentConfig.default(v1alpha1.AgentKind.TEXT_BASH_AGENT).tools.action_format == ActionFormat.TEXT_BASH


def test_a_template_typo_is_refused_by_the_api_model_naming_it() -> None:
    """The same model validates at submit (client), in the operator and in the runner."""
    with pytest.raises(ValidationError, match=r"next_step_template uses unknown variable\(s\) \['observaton'\]"):
        v1alpha1.Templates(next_step_template="{{ observaton }}")
    with pytest.raises(ValidationError, match="instance_template: Jinja syntax error on line 1"):
        v1alpha1.Templates(instance_template="{% if %}")
    # The runner refuses it the same way, as a AgentConfigError naming the field.
    with pytest.raises(AgentConfigError, match=r"templates.*format_error_template uses unknown variable"):
        AgentConfig.from_spec({"templates": {"formatErrorTemplate": "{{ err }}"}})
    with pytest.raises(AgentConfigError, match="command_timeout_template uses unknown variable"):
        AgentConfig.default().with_template("command_timeout_template", "{{ seconds }}")


def test_every_default_comes_from_the_api_model() -> None:
    """No second copy: what a spec leaves unset is what the model's defaults say, and it applies."""
    for kind in v1alpha1.AgentKind:
        config = AgentConfig.default(kind)
        agent = v1alpha1.Agent(kind=kind)
        assert config.templates.model_dump() == agent.templates.resolved(agent.action_format)
        assert config.tools.blocklist == agent.tools.blocklist and "more" in config.tools.blocklist
        assert config.tools.blocklist_standalone == agent.tools.blocklist_standalone
        assert config.tools.env == agent.tools.env == {**config.tools.env, "PAGER": "cat"}
        assert config.limits.max_consecutive_timeouts == agent.max_consecutive_timeouts == 3
        assert config.limits.max_turns == agent.max_turns
    # A spec that sets only its own blocklist keeps the standalone list and the shell env.
    custom = AgentConfig.from_spec(v1alpha1.Agent(tools=v1alpha1.Tools(blocklist=["rm -rf"])))
    assert custom.tools.blocklist == ["rm -rf"]
    assert blocked_command("python", custom.tools.blocklist, custom.tools.blocklist_standalone)


def test_render_is_strict() -> None:
    with pytest.raises(AgentConfigError, match="observation"):
        AgentConfig.default().render("next_step_template", TASK)


def test_from_spec_overlays_the_defaults() -> None:
    agent = v1alpha1.Agent(
        kind=v1alpha1.AgentKind.CHAT_AGENT,
        templates=v1alpha1.Templates(system_template="Be brief about {{repo}}."),
        tools=v1alpha1.Tools(
            enabled=[v1alpha1.ToolName.BASH, v1alpha1.ToolName.SUBMIT], blocklist=["rm -rf"], max_observation_chars=500
        ),
        max_turns=7,
        max_requeries=1,
        command_timeout_seconds=9,
        total_execution_timeout_seconds=99,
    )
    config = AgentConfig.from_spec(agent, max_context_tokens=4096)
    assert config.render("system_template", TASK) == "Be brief about r."
    assert config.templates.instance_template == AgentConfig.default().templates.instance_template
    assert [t["function"]["name"] for t in tool_schemas(config.tools.enabled)] == ["bash", "submit"]
    assert config.tools.blocklist == ["rm -rf"] and config.tools.max_observation_chars == 500
    assert (config.limits.max_turns, config.limits.max_requeries) == (7, 1)
    assert (config.limits.command_timeout, config.limits.total_execution_time) == (9.0, 99.0)
    assert config.limits.max_context_tokens == 4096


def test_submit_must_stay_enabled() -> None:
    with pytest.raises(ValidationError, match="must include submit"):
        v1alpha1.Tools(enabled=[v1alpha1.ToolName.BASH])
    with pytest.raises(AgentConfigError, match="tools: Value error, enabled must include submit"):
        AgentConfig.from_spec({"tools": {"enabled": ["bash"]}})


def test_text_actions() -> None:
    assert parse_text_action("Thinking.\n```bash\nls -la\n```\n") == BashAction(command="ls -la")
    assert parse_text_action("```bash\nsubmit\n```") == SubmitAction()
    assert parse_text_action("```bash\ncat <<'EOF' > f\na\nEOF\n```") == BashAction(command="cat <<'EOF' > f\na\nEOF")
    with pytest.raises(FormatError, match="exactly one ```bash code block in the reply, found 0"):
        parse_text_action("just talk")
    with pytest.raises(FormatError, match="found 2"):
        parse_text_action("```bash\nls\n```\n```bash\npwd\n```")


def test_tool_calls() -> None:
    enabled = ["bash", "str_replace_editor", "submit"]
    assert parse_tool_call(ToolCall(id="1", name="bash", arguments={"command": "ls"}), enabled) == BashAction(
        command="ls"
    )
    editor = parse_tool_call(
        ToolCall(id="1", name="str_replace_editor", arguments={"command": "view", "path": "/a", "view_range": None}),
        enabled,
    )
    assert editor == EditorAction(command="view", path="/a")
    with pytest.raises(FormatError, match="bad arguments for str_replace_editor: command"):
        parse_tool_call(
            ToolCall(id="1", name="str_replace_editor", arguments={"command": "delete", "path": "/a"}), enabled
        )
    with pytest.raises(FormatError, match="bad arguments for bash: command: Field required"):
        parse_tool_call(ToolCall(id="1", name="bash", arguments={"cmd": "ls"}), enabled)
    with pytest.raises(FormatError, match="no tool named 'str_replace_editor'"):
        parse_tool_call(ToolCall(id="1", name="str_replace_editor", arguments={}), ["bash", "submit"])


def test_blocklist() -> None:
    config = AgentConfig.default().tools
    assert blocked_command("vim calc.py", config.blocklist, config.blocklist_standalone)
    assert blocked_command("  python3  ", config.blocklist, config.blocklist_standalone)
    assert blocked_command("tail -f log", config.blocklist, config.blocklist_standalone)
    assert not blocked_command("vimdiff a b", config.blocklist, config.blocklist_standalone)
    assert not blocked_command("python3 -c 'print(1)'", config.blocklist, config.blocklist_standalone)


def test_exit_status_helpers() -> None:
    assert autosubmitted(ExitStatus.EXIT_FORMAT) == "submitted (exit_format)"
    assert produced_patch("submitted") and produced_patch("submitted (exit_context)")
    assert not produced_patch("exit_context")
    assert is_truncated("submitted (exit_context)") and not is_truncated("submitted")


def test_task_info_from_the_spec_instance() -> None:
    from agent_runner.agent.run_state import TaskInfo

    instance = v1alpha1.Instance(
        instance_id="calc-1",
        repo="example/calc",
        base_commit="abc1234",
        image="file:calc",
        problem_statement="add() subtracts",
    )
    task = TaskInfo.from_instance(instance)
    assert task == TaskInfo(
        problem_statement="add() subtracts",
        working_dir="/testbed",
        base_commit="abc1234",
        repo="example/calc",
        instance_id="calc-1",
    )
