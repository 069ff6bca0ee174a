"""str_replace_editor: view / create / str_replace / insert / undo_edit, with SWE-agent's semantics.

All file I/O goes through the sandbox. The undo history is a plain dict owned
by the caller (the loop state), so it survives a snapshot and resume.
"""

from __future__ import annotations

import posixpath
import shlex

from agent_runner.agent.tools.actions import EditorAction
from agent_runner.sandbox import Sandbox

SNIPPET_CONTEXT_LINES = 4
"""Lines shown around an edit in the confirmation snippet."""
MAX_UNDO_DEPTH = 10
"""Previous versions kept per file; older ones are dropped."""


class EditorError(Exception):
    """An editor command failed; the message is the observation the model sees."""


def numbered(text: str, first_line: int = 1) -> str:
    """`cat -n` style: right-aligned line numbers, a tab, the line."""
    return "\n".join(f"{number:6}\t{line}" for number, line in enumerate(text.split("\n"), start=first_line))


class StrReplaceEditor:
    def __init__(self, sandbox: Sandbox, history: dict[str, list[str]], *, working_dir: str) -> None:
        self._sandbox = sandbox
        self._history = history
        self._working_dir = working_dir

    async def run(self, action: EditorAction) -> str:
        """Perform `action`; returns the observation, raises EditorError with the model-facing message."""
        path = action.path
        if not posixpath.isabs(path):
            suggestion = posixpath.join(self._working_dir, path)
            raise EditorError(f"The path {path} is not absolute; paths start with `/`. Did you mean {suggestion}?")
        kind = await self._kind(path)
        if action.command == "create":
            if kind != "missing":
                raise EditorError(f"{path} already exists; `create` never overwrites. Use str_replace to edit it.")
            if action.file_text is None:
                raise EditorError("Parameter `file_text` is required for command: create")
            await self._sandbox.write_file(path, action.file_text)
            self._remember(path, None)
            return f"File created successfully at: {path}"
        if kind == "missing":
            raise EditorError(
                f"The path {path} does not exist. Check it with `str_replace_editor view` on its directory."
            )
        if kind == "dir":
            if action.command != "view":
                raise EditorError(f"{path} is a directory; only `view` works on directories.")
            if action.view_range is not None:
                raise EditorError("`view_range` is not allowed when `path` is a directory.")
            return await self._view_dir(path)
        if action.command == "view":
            return await self._view_file(path, action.view_range)
        if action.command == "str_replace":
            return await self._str_replace(path, action.old_str, action.new_str)
        if action.command == "insert":
            return await self._insert(path, action.insert_line, action.new_str)
        return await self._undo(path)

    async def _kind(self, path: str) -> str:
        quoted = shlex.quote(path)
        result = await self._sandbox.execute(
            f"if [ -d {quoted} ]; then echo dir; elif [ -e {quoted} ]; then echo file; else echo missing; fi",
            timeout=30,
        )
        return result.output.strip()

    async def _view_dir(self, path: str) -> str:
        listing = await self._sandbox.execute(["find", path, "-maxdepth", "2", "-not", "-path", "*/.*"], timeout=30)
        return f"Files and directories up to 2 levels deep in {path}, hidden items excluded:\n{listing.output.rstrip()}"

    async def _view_file(self, path: str, view_range: list[int] | None) -> str:
        text = await self._sandbox.read_file(path)
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        if view_range is None:
            shown, first = lines, 1
        else:
            if len(view_range) != 2:
                raise EditorError("`view_range` must be two integers: [first, last].")
            first, last = view_range
            if not 1 <= first <= max(len(lines), 1):
                raise EditorError(f"Invalid `view_range` {view_range}: first line must be in [1, {len(lines)}].")
            if last == -1:
                last = len(lines)
            if not first <= last <= len(lines):
                raise EditorError(
                    f"Invalid `view_range` {view_range}: last line must be -1 or in [{first}, {len(lines)}]."
                )
            shown = lines[first - 1 : last]
        return f"Here's the result of running `cat -n` on {path}:\n{numbered(chr(10).join(shown), first)}"

    async def _str_replace(self, path: str, old_str: str | None, new_str: str | None) -> str:
        if old_str is None or old_str == "":
            raise EditorError("Parameter `old_str` is required (and non-empty) for command: str_replace")
        text = await self._sandbox.read_file(path)
        count = text.count(old_str)
        if count == 0:
            raise EditorError(f"No replacement was performed: old_str `{old_str}` does not occur verbatim in {path}.")
        if count > 1:
            lines = sorted({text[:index].count("\n") + 1 for index in _find_all(text, old_str)})
            raise EditorError(
                f"No replacement was performed: old_str `{old_str}` occurs {count} times, on lines {lines}. "
                "Include more surrounding text so it is unique."
            )
        replacement = new_str or ""
        new_text = text.replace(old_str, replacement)
        await self._sandbox.write_file(path, new_text)
        self._remember(path, text)
        start_line = text.split(old_str)[0].count("\n")
        return self._edited(path, new_text, start_line, replacement.count("\n"))

    async def _insert(self, path: str, insert_line: int | None, new_str: str | None) -> str:
        if insert_line is None:
            raise EditorError("Parameter `insert_line` is required for command: insert")
        if new_str is None:
            raise EditorError("Parameter `new_str` is required for command: insert")
        text = await self._sandbox.read_file(path)
        lines = text.split("\n")
        n_lines = len(lines) - 1 if text.endswith("\n") else len(lines)
        if not 0 <= insert_line <= n_lines:
            raise EditorError(f"Invalid `insert_line` {insert_line}: it must be in [0, {n_lines}].")
        new_lines = new_str.split("\n")
        new_text = "\n".join(lines[:insert_line] + new_lines + lines[insert_line:])
        await self._sandbox.write_file(path, new_text)
        self._remember(path, text)
        return self._edited(path, new_text, insert_line, len(new_lines) - 1)

    async def _undo(self, path: str) -> str:
        versions = self._history.get(path)
        if not versions:
            raise EditorError(f"No edit history found for {path}.")
        previous = versions.pop()
        await self._sandbox.write_file(path, previous)
        return f"Last edit to {path} undone successfully. {self._snippet(previous, 0, previous.count(chr(10)))}"

    def _remember(self, path: str, previous: str | None) -> None:
        # A file created by `create` has no previous version to restore.
        if previous is None:
            return
        versions = self._history.setdefault(path, [])
        versions.append(previous)
        del versions[:-MAX_UNDO_DEPTH]

    def _edited(self, path: str, text: str, first_changed: int, extra_lines: int) -> str:
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
            f"{self._snippet(text, first_changed, first_changed + extra_lines)}\n"
            "Review the changes and make sure they are as expected. Edit the file again if necessary."
        )

    @staticmethod
    def _snippet(text: str, first_changed: int, last_changed: int) -> str:
        """Numbered lines around the changed 0-based line range."""
        lines = text.split("\n")
        start = max(0, first_changed - SNIPPET_CONTEXT_LINES)
        end = min(len(lines), last_changed + SNIPPET_CONTEXT_LINES + 1)
        return numbered("\n".join(lines[start:end]), start + 1)


def _find_all(text: str, needle: str) -> list[int]:
    positions, start = [], text.find(needle)
    while start != -1:
        positions.append(start)
        start = text.find(needle, start + 1)
    return positions
