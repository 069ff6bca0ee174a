"""A cold start's seconds: where they go, and the one slow step taken off the critical path.

The runner's start was measured step by step (docs/architecture.md, "Where a cold start's
seconds go"). The tokenizer is the step worth moving: importing transformers and parsing a
tokenizer.json take seconds of CPU that need nothing from the sandbox, yet they used to wait
for swerex to answer and for the first assignment. `TokenizerPrefetch` starts them in a
thread once the runner's own imports are done (started earlier, the two would only share
the GIL, and two threads importing at once risk a concurrent circular import), from the name
the pod spec gives (RunnerEnv.tokenizer), while the runner waits on swerex and the operator;
the setup then waits only for what is left.

`new_timeline()` notes when each step is done, in seconds since the process began (the
kernel's start time of this process, so the interpreter's own start and the imports count),
and logs one line at the first /generate (`Timeline.finish`): the runner's log, kept in the
result store with each report (status.logs.runner), is where the bench reads it.
"""

from __future__ import annotations

import time

from .timeline import Prefetch, Timeline, process_age
from .timeline import parse_line as _parse_line

STEPS = ("imports", "tokenizer", "swerex", "assignment", "setup", "first /generate")
"""In the order a cold start usually meets them; `tokenizer` runs beside the next two."""
LINE_PREFIX = "startup timeline (s since the process began): "
FIRST_GENERATE = "first /generate"
GO = "go"
"""A prepared run's go (its `run` assignment taken): with FIRST_GENERATE after it, the
runner's own share of a warm start, apart from the operator's and the network's."""


def new_timeline() -> Timeline:
    return Timeline(LINE_PREFIX, clock=time.monotonic, origin=time.monotonic() - process_age())


def parse_line(text: str) -> dict[str, float]:
    """The marks of the last startup timeline line in a runner log (empty when there is none)."""
    return _parse_line(text, LINE_PREFIX)


class TokenizerPrefetch:
    """The pod spec's tokenizer loading in a thread; `wait(name)` waits for it when `name` is the one loading."""

    def __init__(self, name: str | None, timeline: Timeline) -> None:
        self.name = name

        def load() -> None:
            # Imported here: the tokenizer's parse is the slow step this thread takes off the path.
            from swerollout.runner_tokenizer import load_runner_tokenizer

            load_runner_tokenizer(name)  # cached per name: the setup's own call finds it
            timeline.mark("tokenizer")

        self._prefetch = Prefetch(f"tokenizer prefetch of {name!r}", load if name else None)

    async def wait(self, name: str | None) -> None:
        if name and name == self.name:
            await self._prefetch.wait()
