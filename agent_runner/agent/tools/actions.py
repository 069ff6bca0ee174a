"""Turning a model reply into one action, or a FormatError telling the model what was wrong."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_runner.policy.model import ToolCall
from agent_runner.policy.tool_calls import BashFormatError, parse_bash_block


class FormatError(Exception):
    """The reply holds no usable action. The message is shown to the model (requery)."""


class BashAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: Literal["bash"] = "bash"
    command: str


class EditorAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: Literal["str_replace_editor"] = "str_replace_editor"
    command: Literal["view", "create", "str_replace", "insert", "undo_edit"]
    path: str
    file_text: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    insert_line: int | None = None
    view_range: list[int] | None = None


class SubmitAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: Literal["submit"] = "submit"


Action = BashAction | EditorAction | SubmitAction

_ACTION_BY_TOOL: dict[str, type[BashAction] | type[EditorAction] | type[SubmitAction]] = {
    "bash": BashAction,
    "str_replace_editor": EditorAction,
    "submit": SubmitAction,
}


def parse_tool_call(call: ToolCall, enabled: Iterable[str]) -> Action:
    """Validate one function call against the enabled tools."""
    names = [str(getattr(name, "value", name)) for name in enabled]
    if call.name not in names:
        raise FormatError(f"there is no tool named {call.name!r}; the tools are: {', '.join(names)}")
    arguments: dict[str, Any] = {k: v for k, v in call.arguments.items() if v is not None}
    try:
        action = _ACTION_BY_TOOL[call.name].model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
        )
        raise FormatError(f"bad arguments for {call.name}: {problems}") from None
    if isinstance(action, BashAction) and not action.command.strip():
        raise FormatError("the bash command is empty")
    return action


def parse_text_action(text: str) -> Action:
    """The text format (parsed by agent_runner.policy.tool_calls): one ```bash block; `submit` submits."""
    try:
        command = parse_bash_block(text)
    except BashFormatError as exc:
        raise FormatError(str(exc)) from None
    if not command:
        raise FormatError("the ```bash block is empty")
    if command == "submit":
        return SubmitAction()
    return BashAction(command=command)


def blocked_command(command: str, blocklist: Iterable[str], standalone: Iterable[str]) -> bool:
    """SWE-agent style blocklist: refused if the command is a standalone entry, or starts with an
    entry followed by whitespace (so `vim x` is refused, `vimdiff` is not). Only the start of the
    command is checked; the list protects the session from interactive programs, it is no sandbox."""
    stripped = command.strip()
    if stripped in set(standalone):
        return True
    return any(
        stripped == entry or stripped.startswith(entry + " ") or stripped.startswith(entry + "\n")
        for entry in blocklist
    )
