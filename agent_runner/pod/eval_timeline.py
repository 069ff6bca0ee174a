"""Where an evaluation's seconds go, from the runner's finish to the reward.

The eval runner notes when each step of its pod's life and of the grading is done, as
wall-clock (Unix) seconds, because the steps are compared with the operator's own
receipts in the status (`result.finishedAt`, `reward.gradedAt`) and both sides run on
one machine's clock. It logs one line just before the reward report: that log is
uploaded with the report (status.logs.eval), which is where the bench reads it.

The steps, in the order a prewarmed eval pod meets them (a cold one meets `started`
and `ready` after the finish):

- ``started``: the runner process began (the kernel's start time of the process);
- ``ready``: its sandbox answered and the operator gave its first assignment;
- ``grader``: the grading code is imported (swebench's harness takes seconds);
- ``assignment``: the ``eval`` assignment arrived (the rollout is Evaluating);
- ``patch``: the candidate patch is downloaded and the working directory found;
- ``applied``: the candidate and test patches are applied;
- ``tests``: the eval script ended (``tests`` minus ``applied`` is about testsSeconds);
- ``graded``: the output is graded;
- ``evaluated``: the scratch directory is removed (the harness is done);
- ``uploaded``: the full report is in the result store.

The reward report (with the log) goes out next; the operator's receipt is gradedAt.

`prefetch_grader` takes the grading code's import off that path: swebench's harness imports
docker, datasets and modal eagerly, seconds of CPU (many more with a batch of eval pods
sharing the cores) that used to come after the tests, in the reward's critical path. An eval
runner starts it in a thread as it starts serving, so it runs while the pod waits for its
patch (prewarmed) or for its sandbox and assignment (cold). The grading imports only the
modules it reads, and Python's per-module import locks make it wait for any of them the
thread is still importing; the rest of the package (docker, modal) may still be loading then,
so ``grader`` can come after ``graded``.
"""

from __future__ import annotations

import logging
import time

from agent_runner.eval.grading import swebench_harness_problem

from .timeline import Prefetch, Timeline, process_age
from .timeline import parse_line as _parse_line

log = logging.getLogger(__name__)

STEPS = (
    "started",
    "ready",
    "grader",
    "assignment",
    "patch",
    "applied",
    "tests",
    "graded",
    "evaluated",
    "uploaded",
)
LINE_PREFIX = "eval timeline (unix s): "


def new_timeline() -> Timeline:
    """A timeline in Unix seconds whose ``started`` is when this process began."""
    timeline = Timeline(LINE_PREFIX, clock=time.time)
    timeline.mark("started", at=time.time() - process_age())
    return timeline


def prefetch_grader(timeline: Timeline) -> Prefetch:
    """Import the grading code in a daemon thread (marks ``grader`` when done)."""

    def load() -> None:
        problem = swebench_harness_problem()  # cached per process: grading's own call finds it
        if problem is not None:
            log.info("grading with the builtin parsers: %s", problem)
        timeline.mark("grader")

    return Prefetch("grader prefetch", load)


def parse_line(text: str) -> dict[str, float]:
    """The marks of the last eval timeline line in a log (empty when there is none)."""
    return _parse_line(text, LINE_PREFIX)
