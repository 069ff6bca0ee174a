"""A cold start's seconds: where they go, and the one slow step taken off the critical path.

The runner's start was measured step by step (docs/architecture.md, "Where a cold start's
seconds go"). The tokenizer is the step worth moving: importing transformers and parsing a
tokenizer.json take seconds of CPU that need nothing from the sandbox, yet they used to wait
for swerex to answer and for the first assignment. `TokenizerPrefetch` starts them in a
thread once the runner's own imports are done (started earlier, the two would only share
the GIL, and two threads importing at once risk a concurrent circular import), from the name
the pod spec gives (RunnerEnv.tokenizer), while the runner waits on swerex and the operator;
the setup then waits only for what is left.

`StartupTimeline` notes when each step is done, in seconds since the process began (the
kernel's start time of this process, so the interpreter's own start and the imports count),
and logs one line at the first /generate: the runner's log, kept in the result store with
each report (status.logs.runner), is where the bench reads it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future

log = logging.getLogger(__name__)

STEPS = ("imports", "tokenizer", "swerex", "assignment", "setup", "first /generate")
"""In the order a cold start usually meets them; `tokenizer` runs beside the next two."""
LINE_PREFIX = "startup timeline (s since the process began): "


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


class StartupTimeline:
    def __init__(self) -> None:
        self._origin = time.monotonic() - process_age()
        self.marks: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, step: str) -> None:
        """Note `step` done now (the first time only: a later turn does not move it)."""
        with self._lock:
            self.marks.setdefault(step, round(time.monotonic() - self._origin, 3))

    def line(self) -> str:
        return LINE_PREFIX + ", ".join(f"{step} {at:.3f}" for step, at in self.marks.items())

    def first_generate(self) -> None:
        if "first /generate" not in self.marks:
            self.mark("first /generate")
            log.info("%s", self.line())


def parse_line(text: str) -> dict[str, float]:
    """The marks of the last timeline line in a runner log (empty when there is none)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if LINE_PREFIX not in line:
            continue
        found = {}
        for part in line.split(LINE_PREFIX, 1)[1].split(", "):
            step, _, at = part.rpartition(" ")
            try:
                found[step] = float(at)
            except ValueError:
                continue
    return found


class TokenizerPrefetch:
    """The tokenizer loading in a thread; `wait(name)` waits for it when `name` is the one loading."""

    def __init__(self, name: str | None, timeline: StartupTimeline) -> None:
        self.name = name
        self._future: Future[None] = Future()
        if not name:
            self._future.set_result(None)
            return
        threading.Thread(target=self._load, args=(name, timeline), name="tokenizer-prefetch", daemon=True).start()

    def _load(self, name: str, timeline: StartupTimeline) -> None:
        # Imported here: the tokenizer's parse is the slow step this thread takes off the path.
        from swerollout.runner_tokenizer import load_runner_tokenizer

        try:
            load_runner_tokenizer(name)  # cached per name: the setup's own call finds it
            timeline.mark("tokenizer")
        except Exception as exc:  # noqa: BLE001 - the setup loads it again and reports the error
            log.info("tokenizer prefetch of %r failed (%s); the setup loads it", name, exc)
        finally:
            self._future.set_result(None)

    async def wait(self, name: str | None) -> None:
        if name and name == self.name:
            await asyncio.wrap_future(self._future)
