"""Reading what a replayed rollout left in a filesystem store: the snapshot its checkpoint
chain restores, and the commands the oracle's ledger says ran (tests/e2e, tests/cluster)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any


def restored_snapshot(head: Path) -> Any:
    """The snapshot the checkpoint chain whose head segment is the file ``head`` restores
    (agent_runner.pod.checkpoint; a chain's segments sit side by side, named by sha256):
    the one chain restore of the tests, for a dev stack's store (`DevStack.stored`) and a real
    node's."""
    from agent_runner.pod.checkpoint import restore_chain

    async def fetch(sha256: str, size: int) -> bytes:
        return (head.parent / sha256).read_bytes()

    snapshot, _ = asyncio.run(restore_chain(head.read_bytes(), fetch))
    return snapshot


def ledger_runs(patch: str) -> list[str]:
    """The lines the submitted patch adds to the oracle's ledger file: one per command run."""
    from swerollout_dev.policy_server.policies.scripted import LEDGER_FILE

    files = re.split(r"^diff --git ", patch, flags=re.M)
    [ledger] = [f for f in files if f.startswith(f"a/{LEDGER_FILE} ")] or [""]
    return [line[1:] for line in ledger.splitlines() if line.startswith("+") and not line.startswith("+++")]
