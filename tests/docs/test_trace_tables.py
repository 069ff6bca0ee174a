"""docs/architecture.md lists every file a newcomer reads to follow `spec.suspend` end to
end, with their count: a file merged, moved or renamed there fails here, not in the
hands of the next reader."""

from __future__ import annotations

import re

from tests.support.docblocks import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEADING = re.compile(r"^\*\*Every file on the path, in order \((\d+)\)\.\*\*", re.M)
ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \|", re.M)


def test_the_suspend_path_table_names_files_that_exist_and_counts_them() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    [heading] = HEADING.finditer(text)
    table = text[heading.end() : text.index("\n\n", text.index("| --- |", heading.end()))]
    rows = ROW.findall(table)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "rows numbered 1, 2, ... in order"
    assert int(heading.group(1)) == len(rows), f"the heading says {heading.group(1)} files, the table has {len(rows)}"
    missing = [path for _, path in rows if not (ROOT / path).is_file()]
    assert not missing, f"docs/architecture.md's spec.suspend table names files that do not exist: {missing}"
    assert len({path for _, path in rows}) == len(rows), "a file is listed twice"
