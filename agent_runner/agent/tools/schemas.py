"""OpenAI function schemas of the tools; the model renders them through its chat template."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

BASH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run one command in a persistent bash shell (cd and exported variables persist between calls). "
            "Commands cannot read keyboard input and are stopped after a timeout; run long jobs in the "
            "background with their output redirected to a file."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to run."}},
            "required": ["command"],
        },
    },
}

STR_REPLACE_EDITOR: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "str_replace_editor",
        "description": (
            "View, create and edit files. Paths must be absolute.\n"
            "* view: a file is shown with line numbers (optionally only view_range); a directory lists "
            "its files two levels deep, hidden ones excluded.\n"
            "* create: write file_text to a new path (fails if it exists).\n"
            "* str_replace: replace old_str, which must occur exactly once (whitespace included), by new_str.\n"
            "* insert: insert new_str after line insert_line (0 = at the top).\n"
            "* undo_edit: restore the file as it was before the last edit of it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                    "description": "The operation.",
                },
                "path": {"type": "string", "description": "Absolute path of the file or directory."},
                "file_text": {"type": "string", "description": "create: the content of the new file."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
                "new_str": {"type": "string", "description": "str_replace / insert: the new text."},
                "insert_line": {"type": "integer", "description": "insert: new_str goes after this line."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "view: [first, last] line to show, 1-based; last = -1 means to the end.",
                },
            },
            "required": ["command", "path"],
        },
    },
}

SUBMIT: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Finish: the changes in the repository become your answer.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}

_BY_NAME = {"bash": BASH, "str_replace_editor": STR_REPLACE_EDITOR, "submit": SUBMIT}


def tool_schemas(enabled: Iterable[str]) -> list[dict[str, Any]]:
    """The schemas of the enabled tools, in the given order."""
    names = [str(getattr(name, "value", name)) for name in enabled]
    unknown = [name for name in names if name not in _BY_NAME]
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; known: {sorted(_BY_NAME)}")
    return [_BY_NAME[name] for name in names]
