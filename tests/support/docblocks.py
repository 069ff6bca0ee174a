"""The fenced code blocks of README.md and docs/*.md, and the marker before each.

Every shell or Python block is either run by a test or marked as an illustration with
its reason, on the line right before its fence:

    <!-- tested-by: tests/e2e/test_readme_by_hand.py::test_the_readme_by_hand_block_as_written -->
    <!-- illustration: needs a GPU SGLang server and a trainer's cluster -->

A test reads the blocks it runs through `blocks_run_by` (by its own PATH::NAME), so what
it runs is always what the reader sees, and it compares their commands with the ones it
knows how to check, so an edited block fails until the test follows it.
tests/docs/test_doc_blocks.py checks that every block carries one marker or the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Blocks a reader types or pastes: each needs a marker. yaml/json/text blocks are data.
COMMAND_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "python", ""})
_FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
# A shell comment: `#` at the start or after a blank, to the end of the line.
_COMMENT = re.compile(r"(^|\s)#.*$")
_MARKER = re.compile(r"<!--\s*(tested-by|illustration):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    doc: str
    """Path relative to the repository root, e.g. ``README.md``."""
    line: int
    """Line of the opening fence (1-based)."""
    language: str
    text: str
    marker: str | None
    """``tested-by``, ``illustration`` or None."""
    value: str
    """The test file, or the illustration's reason."""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def commands(self) -> list[str]:
        """The shell commands: continuations joined, comments and blank lines dropped,
        runs of blanks made one."""
        joined = self.text.replace("\\\n", " ")
        lines = [_COMMENT.sub("", line) for line in joined.splitlines()]
        return [" ".join(line.split()) for line in lines if line.strip()]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    text = doc.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].removesuffix("\n").rsplit("\n", 1)[-1]  # the line right above the fence
        marker = _MARKER.search(before)
        found.append(
            Block(
                doc=str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc),
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group(1),
                text=match.group(2),
                marker=marker.group(1) if marker else None,
                value=marker.group(2) if marker else "",
            )
        )
    return found


def blocks_run_by(doc: str, test: str) -> list[Block]:
    """The blocks of ``doc`` (relative to the root) whose marker names ``test``
    (``tests/...py::test_name``), in the document's order."""
    found = [b for b in blocks(ROOT / doc) if b.marker == "tested-by" and b.value == test]
    assert found, f"no block of {doc} is marked <!-- tested-by: {test} -->"
    return found
