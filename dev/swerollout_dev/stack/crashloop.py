"""How often the dev supervisor restarts a component that keeps dying.

A kubelet restarts a crashing container with a growing pause and forgets the crashes
once the container has run ten minutes: a component that dies once a day is restarted
for as long as the stack is up, and one that dies on every start is given up on
quickly, its log named. The supervisor follows the same rule for the node agent, the
operator, kube-apiserver and etcd.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MAX_IN_A_ROW = 5
"""Deaths in a row (each within HEALTHY_SECONDS of its start) before the supervisor gives up."""
HEALTHY_SECONDS = 600.0
"""A start that lived this long ends the row: the next death counts as the first."""


@dataclass
class CrashLoop:
    """The deaths in a row of one component since its last healthy run."""

    in_a_row: int = 0
    started: float = field(default_factory=time.monotonic)

    def died(self, now: float | None = None) -> bool:
        """Count a death; whether the component may be started again."""
        now = time.monotonic() if now is None else now
        if now - self.started >= HEALTHY_SECONDS:
            self.in_a_row = 0
        if self.in_a_row >= MAX_IN_A_ROW:
            return False
        self.in_a_row += 1
        return True

    def pause(self) -> float:
        """Seconds to wait before the next start: doubling with each death in a row, at most 7.5 s."""
        return min(2.0**self.in_a_row, 30.0) / 4

    def restarted(self, now: float | None = None) -> None:
        self.started = time.monotonic() if now is None else now
