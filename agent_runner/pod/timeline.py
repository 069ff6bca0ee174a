"""Where a runner's seconds go: steps marked once each, logged as one line, and slow work
moved into a thread.

Both runner timelines (a rollout's cold start, `startup`; an eval pod from the finish to
the reward, `eval_timeline`) are this one shape: each step is noted the first time it is
done, and one line with every mark is logged when the run reaches its last step. That log is
uploaded with the runner's report (status.logs), which is where the benches read the line back
with `parse_line`. They differ only in their clock: the cold start counts seconds since the
kernel started this process; the eval pod keeps Unix seconds, because its steps are compared
with the operator's receipts in the status.

`Prefetch` runs one slow, GIL-light import or parse in a daemon thread while the runner waits
on the network, so the step that needs it waits only for what is left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger(__name__)


def process_age() -> float:
    """Seconds since the kernel started this process; 0 when /proc does not say."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22 (after the parenthesised command, which may hold spaces): start time in ticks since boot.
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


class Timeline:
    """Marks in seconds on ``clock`` minus ``origin`` (kept to the millisecond), the first time each step is done."""

    def __init__(self, prefix: str, *, clock: Callable[[], float], origin: float = 0.0) -> None:
        self.prefix = prefix
        self._clock = clock
        self._origin = origin
        self.marks: dict[str, float] = {}
        self._lock = threading.Lock()  # prefetch threads mark too

    def mark(self, step: str, *, at: float | None = None) -> None:
        """Note ``step`` done now, or ``at`` (on this timeline's clock); a later call keeps the first."""
        with self._lock:
            self.marks.setdefault(step, round((self._clock() if at is None else at) - self._origin, 3))

    def finish(self, step: str) -> None:
        """Mark the last step and log the line, once (later calls do nothing)."""
        with self._lock:
            if step in self.marks:
                return
            self.marks[step] = round(self._clock() - self._origin, 3)
        log.info("%s", self.line())

    def line(self) -> str:
        with self._lock:
            return self.prefix + ", ".join(f"{step} {at:.3f}" for step, at in self.marks.items())


def parse_line(text: str, prefix: str) -> dict[str, float]:
    """The marks of the last ``prefix`` line in a log (empty when there is none)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if prefix not in line:
            continue
        found = {}
        for part in line.split(prefix, 1)[1].split(", "):
            step, _, at = part.rpartition(" ")
            try:
                found[step] = float(at)
            except ValueError:
                continue
    return found


class Prefetch:
    """``work`` in a daemon thread, started now; `wait()` returns once it has ended.

    A failure is logged, not raised: the step that needs the result does the work again
    (the work caches its result) and reports the error where the run can name it."""

    def __init__(self, name: str, work: Callable[[], None] | None) -> None:
        self._done: Future[None] = Future()
        self.thread: threading.Thread | None = None
        if work is None:
            self._done.set_result(None)
            return
        self.thread = threading.Thread(target=self._run, args=(name, work), name=name, daemon=True)
        self.thread.start()

    def _run(self, name: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - the step that needs it does it again and reports
            log.info("%s failed (%s); the step that needs it does it again", name, exc)
        finally:
            self._done.set_result(None)

    async def wait(self) -> None:
        await asyncio.wrap_future(self._done)
