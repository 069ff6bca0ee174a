"""Every shell and Python block of README.md and docs/*.md is run by a test, or marked as
an illustration with the reason (the markers and the reader: tests/support/docblocks.py).
A test that runs blocks compares their commands with the ones it checks, so a block that
drifts from what the test runs fails there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docblocks import COMMAND_LANGUAGES, ROOT, blocks, documents

# An illustration says why it is not run; a word or two is not a reason.
MIN_REASON = 30


def _problems(block_list: list) -> list[str]:  # type: ignore[type-arg]
    problems = []
    for block in block_list:
        if block.language not in COMMAND_LANGUAGES:
            continue
        kind = f"a {block.language} block" if block.language else "a block with no language (`text` for a figure)"
        if block.marker is None:
            problems.append(
                f"{block.where}: {kind} and no marker: put `<!-- tested-by: tests/...py::test_name -->` (the test "
                "that runs it) or `<!-- illustration: why it is not run -->` on the line right before its fence"
            )
        elif block.marker == "illustration":
            if len(block.value) < MIN_REASON:
                problems.append(f"{block.where}: illustration {block.value!r}: say why it is not run")
        else:
            path, _, name = block.value.partition("::")
            source = ROOT / path
            if not name or not source.is_file():
                problems.append(f"{block.where}: tested-by {block.value!r}: name an existing test as PATH::NAME")
                continue
            code = source.read_text()
            if not re.search(rf"^(async )?def {re.escape(name)}\(", code, re.M):
                problems.append(f"{block.where}: tested-by {block.value!r}: {path} has no test {name}")
            elif block.value not in code or "blocks_run_by(" not in code:
                problems.append(f"{block.where}: {path} never reads this block (blocks_run_by(..., {block.value!r}))")
    return problems


def test_every_command_block_is_tested_or_an_illustration() -> None:
    every = [block for doc in documents() for block in blocks(doc)]
    commands = [b for b in every if b.language in COMMAND_LANGUAGES]
    assert len(commands) >= 12, f"only {len(commands)} command blocks found: is the fence pattern still right?"
    problems = _problems(every)
    assert not problems, "\n".join(problems)


def test_a_block_without_a_marker_or_with_a_stale_one_is_named(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# A page\n\n"
        "<!-- illustration: needs a GPU server that this machine does not have -->\n```bash\nrun-on-gpu\n```\n\n"
        "<!-- illustration: later -->\n\n```python\nprint(1)\n```\n\n"  # a blank line: not this block's marker
        "<!-- illustration: x -->\n```sh\necho short reason\n```\n\n"
        "<!-- tested-by: tests/docs/test_doc_blocks.py::test_that_does_not_exist -->\n```bash\ntrue\n```\n\n"
        "```\nplain fence\n```\n\n"
        "```yaml\nkey: data, not a command\n```\n"
    )
    found = blocks(doc)
    assert [(b.line, b.language, b.marker) for b in found] == [
        (4, "bash", "illustration"),
        (10, "python", None),
        (15, "sh", "illustration"),
        (20, "bash", "tested-by"),
        (24, "", None),
        (28, "yaml", None),
    ]
    problems = _problems(found)
    assert [p.split(":")[1] for p in problems] == ["10", "15", "20", "24"], problems
    assert "has no test test_that_does_not_exist" in problems[2]


def test_commands_join_continuations_and_drop_comments(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text('```bash\n# a comment line\na --x "$(b c)" \\\n    --y z   # why\nd # one blank is enough\n```\n')
    (block,) = blocks(doc)
    assert block.commands() == ['a --x "$(b c)" --y z', "d"]
