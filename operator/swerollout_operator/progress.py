"""Progress coalescing: runners report often, status is written at most every few seconds.

Fine-grained numbers go to metrics at once; the status gets the latest progress
when the interval has passed, written by the sweep (the report itself is answered
at once: a runner's turn loop waits for that answer, and at a thousand rollouts a
status write can wait a minute behind the API server's backlog; a progress report
was never a durable write, it is coalesced). The event that ends a run carries its
final progress in the same status write, so `status.progress` always agrees with
`status.result`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from swerollout.api import v1alpha1 as api
from swerollout.kube import KubeError
from swerollout.wire.ingest import ProgressReport

from . import retries
from .cache import Tracked
from .metrics import OperatorMetrics

log = logging.getLogger(__name__)
StatusWriter = Callable[[Tracked, api.SWERolloutStatus], Awaitable[None]]


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class ProgressCoalescer:
    def __init__(self, write_status: StatusWriter, metrics: OperatorMetrics, interval: float) -> None:
        self.write_status = write_status
        self.metrics = metrics
        self.interval = interval
        self.dirty: dict[str, Tracked] = {}
        """Rollouts with a report not yet written (by uid): the sweep looks at these, not at all."""

    async def report(self, entry: Tracked, progress: ProgressReport) -> None:
        for seconds in progress.generation_seconds:
            self.metrics.generation_seconds.observe(seconds)
        for seconds in progress.tool_seconds:
            self.metrics.tool_seconds.observe(seconds)
        delta = progress.generated_tokens - entry.generated_reported
        if delta > 0:
            self.metrics.generated_tokens.inc(delta)
            entry.generated_reported = progress.generated_tokens
        entry.progress = progress
        entry.progress_dirty = True
        self.dirty[entry.uid] = entry

    def due(self, entry: Tracked) -> bool:
        return entry.progress_dirty and time.monotonic() - entry.progress_written_at >= self.interval

    def take_due(self, limit: int) -> list[Tracked]:
        """Up to `limit` rollouts whose progress should be written now, oldest report first
        (the others stay for a later sweep; no longer dirty ones are dropped)."""
        out: list[Tracked] = []
        for uid, entry in list(self.dirty.items()):
            if len(out) >= limit:
                break
            if not entry.progress_dirty or entry.phase.is_terminal:
                del self.dirty[uid]
            elif self.due(entry):
                del self.dirty[uid]
                out.append(entry)
        return out

    async def flush(self, entry: Tracked) -> None:
        progress = entry.progress
        if progress is None or not entry.progress_dirty or entry.phase.is_terminal:
            return
        entry.progress_dirty = False
        entry.progress_written_at = time.monotonic()
        status = api.Progress(
            turns=progress.turns,
            tokens=progress.context_tokens,
            generated_tokens=progress.generated_tokens,
            inference_aborts=progress.inference_aborts,
            updated_at=_now(),
        )
        out = api.SWERolloutStatus(progress=status)
        checkpoint = progress.checkpoint
        if checkpoint is not None and checkpoint.attempt >= max(1, entry.rollout_status.attempts):
            # In the same coalesced write: no status write of its own per turn.
            out.checkpoint = retries.to_status(checkpoint)
        try:
            await self.write_status(entry, out)
        except KubeError as exc:
            entry.progress_dirty = True
            self.dirty[entry.uid] = entry
            log.warning("progress patch for %s/%s failed: %s", entry.namespace, entry.name, exc)
