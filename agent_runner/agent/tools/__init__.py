"""The agent's tools: bash, str_replace_editor, submit (schemas, parsing, execution)."""

from agent_runner.agent.tools.actions import (
    Action,
    BashAction,
    EditorAction,
    FormatError,
    SubmitAction,
    blocked_command,
    parse_text_action,
    parse_tool_call,
)
from agent_runner.agent.tools.editor import EditorError, StrReplaceEditor
from agent_runner.agent.tools.schemas import tool_schemas

__all__ = [
    "Action",
    "BashAction",
    "EditorAction",
    "EditorError",
    "FormatError",
    "StrReplaceEditor",
    "SubmitAction",
    "blocked_command",
    "parse_text_action",
    "parse_tool_call",
    "tool_schemas",
]
