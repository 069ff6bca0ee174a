"""The working tree a checkpoint or an abort snapshot records (turn_checkpoints.worktree_diff),
read in a real repository through a real swerex-remote: every change is in the diff, and the
agent's own index (what it staged, what it did not) is exactly as it was."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from agent_runner.pod.turn_checkpoints import ABORT_INDEX_COPY, INDEX_COPY, worktree_diff
from tests.support.repo_helpers import RepoSandbox, git


async def test_the_abort_and_checkpoint_reads_leave_the_agents_index_as_it_was(
    repo_sandbox: RepoSandbox, tmp_path: Path
) -> None:
    repo, base = repo_sandbox.repo, repo_sandbox.base_commit
    # The agent staged one change and left the others unstaged, one of them a new file.
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "add", "calc.py")
    (repo / "README.md").write_text("# calc\n\nAdds numbers.\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    index = (repo / ".git" / "index").read_bytes()
    status = git(repo, "status", "--porcelain")
    assert sorted(status.splitlines()) == [" M README.md", "?? blob.bin", "?? notes.txt", "M  calc.py"], status

    # An abort's read while a checkpoint's is in flight (both run during a /generate).
    aborted, checkpointed = await asyncio.gather(
        worktree_diff(repo_sandbox.sandbox, str(repo), base, index_copy=ABORT_INDEX_COPY),
        worktree_diff(repo_sandbox.sandbox, str(repo), base, index_copy=INDEX_COPY),
    )

    assert (repo / ".git" / "index").read_bytes() == index, "the agent's index was written"
    assert git(repo, "status", "--porcelain") == status
    assert git(repo, "diff", "--cached", "--name-only").split() == ["calc.py"]
    assert aborted == checkpointed
    for name in ("calc.py", "README.md", "notes.txt", "blob.bin"):
        assert f"diff --git a/{name} b/{name}" in aborted, aborted
    # The diff is the whole tree: applied to a fresh checkout of the base, it gives the same files.
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(repo), str(fresh)], check=True)
    git(fresh, "checkout", "-q", base)
    (tmp_path / "tree.diff").write_text(aborted)
    git(fresh, "apply", str(tmp_path / "tree.diff"))
    for name in ("calc.py", "README.md", "notes.txt", "blob.bin"):
        assert (fresh / name).read_bytes() == (repo / name).read_bytes(), name
