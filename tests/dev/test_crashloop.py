"""The dev supervisor's restart rule: a row of quick deaths is given up on, a healthy run resets it."""

from __future__ import annotations

from swerollout_dev.stack.crashloop import HEALTHY_SECONDS, MAX_IN_A_ROW, CrashLoop


def _die_quickly(loop: CrashLoop, at: float) -> bool:
    allowed = loop.died(now=at)
    if allowed:
        loop.restarted(now=at + 1)
    return allowed


def test_quick_deaths_in_a_row_are_given_up_on_after_the_budget() -> None:
    loop = CrashLoop(started=0.0)
    allowed = [_die_quickly(loop, at=10.0 * i + 5) for i in range(MAX_IN_A_ROW + 1)]
    assert allowed == [True] * MAX_IN_A_ROW + [False]
    # Each pause doubles, and none is longer than 7.5 s.
    pauses = []
    loop = CrashLoop(started=0.0)
    for i in range(MAX_IN_A_ROW):
        loop.died(now=float(i))
        pauses.append(loop.pause())
        loop.restarted(now=float(i))
    assert pauses == [0.5, 1.0, 2.0, 4.0, 7.5]


def test_a_run_past_the_healthy_time_starts_a_new_row() -> None:
    """A component that dies now and then (once per healthy run) is restarted for as long as the
    stack is up: the count is of deaths in a row, not over the stack's life."""
    loop = CrashLoop(started=0.0)
    now = 0.0
    for _ in range(3 * MAX_IN_A_ROW):
        now += HEALTHY_SECONDS + 1
        assert loop.died(now=now)
        loop.restarted(now=now)
    assert loop.in_a_row == 1
    # Then a row of quick deaths is still caught.
    allowed = [_die_quickly(loop, at=now + 2.0 * (i + 1)) for i in range(MAX_IN_A_ROW)]
    assert allowed == [True] * (MAX_IN_A_ROW - 1) + [False]
