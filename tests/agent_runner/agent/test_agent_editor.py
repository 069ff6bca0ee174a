"""str_replace_editor through a real sandbox: every command and its error messages."""

from __future__ import annotations

import pytest

from agent_runner.agent.tools import EditorAction, EditorError, StrReplaceEditor
from tests.support.repo_helpers import RepoSandbox


@pytest.fixture
def editor(repo_sandbox: RepoSandbox) -> StrReplaceEditor:
    return StrReplaceEditor(repo_sandbox.sandbox, {}, working_dir=str(repo_sandbox.repo))


def act(command: str, path: str, **fields: object) -> EditorAction:
    return EditorAction(command=command, path=path, **fields)  # type: ignore[arg-type]


async def test_view_file_and_range(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    path = str(repo_sandbox.repo / "calc.py")
    whole = await editor.run(act("view", path))
    assert whole.endswith("     1\tdef add(a, b):\n     2\t    return a - b")
    second = await editor.run(act("view", path, view_range=[2, -1]))
    assert second.splitlines()[1:] == ["     2\t    return a - b"]
    with pytest.raises(EditorError, match=r"Invalid `view_range` \[2, 9\]"):
        await editor.run(act("view", path, view_range=[2, 9]))


async def test_view_directory_hides_dotfiles(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    listing = await editor.run(act("view", str(repo_sandbox.repo)))
    assert str(repo_sandbox.repo / "calc.py") in listing
    assert ".git" not in listing
    with pytest.raises(EditorError, match="is a directory"):
        await editor.run(act("str_replace", str(repo_sandbox.repo), old_str="x", new_str="y"))


async def test_create_never_overwrites(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    path = repo_sandbox.repo / "pkg" / "new.py"
    assert "created" in await editor.run(act("create", str(path), file_text="x = 1\n"))
    assert path.read_text() == "x = 1\n"
    with pytest.raises(EditorError, match="already exists"):
        await editor.run(act("create", str(path), file_text="x = 2\n"))
    assert path.read_text() == "x = 1\n"


async def test_str_replace_must_match_exactly_once(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    path = repo_sandbox.repo / "dup.py"
    path.write_text("a = 1\nb = 2\na = 1\n")
    with pytest.raises(EditorError, match=r"occurs 2 times, on lines \[1, 3\]"):
        await editor.run(act("str_replace", str(path), old_str="a = 1", new_str="a = 3"))
    with pytest.raises(EditorError, match="does not occur verbatim"):
        await editor.run(act("str_replace", str(path), old_str="c = 1", new_str="c = 3"))
    assert path.read_text() == "a = 1\nb = 2\na = 1\n"
    out = await editor.run(act("str_replace", str(path), old_str="b = 2", new_str="b = 20"))
    assert "     2\tb = 20" in out
    assert path.read_text() == "a = 1\nb = 20\na = 1\n"


async def test_insert_and_undo(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    path = repo_sandbox.repo / "calc.py"
    original = path.read_text()
    await editor.run(act("insert", str(path), insert_line=0, new_str="# header"))
    await editor.run(act("insert", str(path), insert_line=3, new_str="\ndef sub(a, b):\n    return a - b"))
    assert path.read_text() == "# header\ndef add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n"
    with pytest.raises(EditorError, match=r"Invalid `insert_line` 99: it must be in \[0, 6\]"):
        await editor.run(act("insert", str(path), insert_line=99, new_str="x"))
    await editor.run(act("undo_edit", str(path)))
    assert path.read_text() == "# header\n" + original
    await editor.run(act("undo_edit", str(path)))
    assert path.read_text() == original
    with pytest.raises(EditorError, match="No edit history"):
        await editor.run(act("undo_edit", str(path)))


async def test_path_errors(editor: StrReplaceEditor, repo_sandbox: RepoSandbox) -> None:
    with pytest.raises(EditorError, match=f"not absolute.*Did you mean {repo_sandbox.repo}/calc.py"):
        await editor.run(act("view", "calc.py"))
    with pytest.raises(EditorError, match="does not exist"):
        await editor.run(act("view", str(repo_sandbox.repo / "nope.py")))
    with pytest.raises(EditorError, match="`old_str` is required"):
        await editor.run(act("str_replace", str(repo_sandbox.repo / "calc.py")))
