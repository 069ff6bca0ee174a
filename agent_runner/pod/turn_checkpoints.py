"""The runner's side of per-turn checkpoints: where a segment's working tree comes from,
where segments go, and what a replay restores (the format is agent_runner.pod.checkpoint).

The working tree is read with a copy of the repository's index (GIT_INDEX_FILE), so
recording it never stages anything in the agent's repository: the agent's own `git
status` looks the same with or without checkpoints.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable

from agent_runner.sandbox import Sandbox, SandboxError
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import IngestClient

from .checkpoint import CheckpointWriter, Head, Written, is_checkpoint, restore_chain

INDEX_COPY = "swerollout-checkpoint.index"
"""The checkpoints' copy of the index, in the repository's git directory: never shared with
another rollout's (a dev-mode sandbox without bubblewrap has the host's /tmp), never in the tree."""
ABORT_INDEX_COPY = "swerollout-abort.index"
"""The abort snapshot's own copy: its tree read may overlap a checkpoint's (both run while a
/generate is in flight), and two reads must never share one index file."""


async def worktree_diff(sandbox: Sandbox, workdir: str, base_commit: str, *, index_copy: str) -> str:
    """The working tree (untracked files too) as a binary diff against ``base_commit``, read
    through a copy of the repository's index (GIT_INDEX_FILE, the git directory's
    ``index_copy``): the agent's index is never written, so nothing it did not stage itself
    shows as staged. Raises SandboxError when the tree cannot be read."""
    base = shlex.quote(base_commit)
    copy = '"$SWEROLLOUT_INDEX"'
    command = (
        f'SWEROLLOUT_INDEX="$(git rev-parse --absolute-git-dir)"/{shlex.quote(index_copy)} && '
        f'{{ cp "$(git rev-parse --absolute-git-dir)/index" {copy} 2>/dev/null || rm -f {copy}; }} && '
        f"GIT_INDEX_FILE={copy} git add -A >/dev/null 2>&1 && "
        f"GIT_INDEX_FILE={copy} git diff --cached --binary {base}"
    )
    result = await sandbox.execute(command, timeout=120, cwd=workdir, merge_stderr=False)
    if result.exit_code != 0:
        raise SandboxError(f"reading the working tree failed (exit {result.exit_code})")
    return result.output


def replay_note(attempt: int, turns: int) -> str:
    """What a replayed trajectory says of itself (state.notes, in its info)."""
    start = f"its checkpoint at turn {turns}" if turns else "the beginning"
    return (
        f"attempt {attempt} replayed this rollout into a fresh pod from {start}: the token list continues "
        "exactly from there and the working tree was restored from its recorded diff against the base commit; "
        "effects outside the repository (files elsewhere, installed packages, running processes) were not replayed"
    )


async def restore(ingest: IngestClient, blob: bytes) -> tuple[bytes, Head | None]:
    """The snapshot blob to restore from ``blob`` (a checkpoint chain's head, or an abort's
    snapshot as it is), and the chain's head when it was one (to continue the chain)."""
    if not is_checkpoint(blob):
        return blob, None

    async def fetch(sha256: str, size: int) -> bytes:
        ref = wire.StoredObjectRef(kind=wire.ObjectKind.CHECKPOINT, sha256=sha256, bytes=size, ref="")
        return await ingest.download(ref)

    snapshot, head = await restore_chain(blob, fetch)
    return snapshot.to_bytes(), head


def writer(
    sandbox: Sandbox,
    ingest: IngestClient,
    *,
    workdir: str,
    base_commit: str,
    attempt: int,
    head: Head | None,
    send: Callable[[wire.CheckpointReport], Awaitable[None]],
) -> CheckpointWriter:
    """A writer for one run: diffs in ``sandbox``, uploads through ``ingest``, tells the
    operator each stored head through ``send`` (a progress report)."""

    async def diff() -> str:
        return await worktree_diff(sandbox, workdir, base_commit, index_copy=INDEX_COPY)

    async def upload(blob: bytes) -> wire.StoredObjectRef:
        return await ingest.upload(wire.ObjectKind.CHECKPOINT, blob)

    async def on_written(w: Written) -> None:
        await send(
            wire.CheckpointReport(
                head=w.ref,
                attempt=attempt,
                segments=w.segments,
                chain_bytes=w.chain_bytes,
                turns=w.turns,
                context_tokens=w.tokens,
                sampled_tokens=w.sampled_tokens,
            )
        )

    return CheckpointWriter(diff=diff, upload=upload, on_written=on_written, head=head)
