"""Stopping a detached supervisor (`dev down`, `cluster down`): one way for both.

SIGTERM first, so the supervisor stops its components in order and records it;
past the grace period, SIGKILL it and every process it started (its process tree
and session), so a hung supervisor never keeps its children alive.
"""

from __future__ import annotations

import os
import signal
import time

from swerollout_dev.nodeagent.process import kill_tree

from .state import ComponentState


def stop_supervisor(supervisor: ComponentState, grace: float) -> bool:
    """Stop ``supervisor`` if it still runs; False when it had to be killed after ``grace`` seconds."""
    if not supervisor.alive() or supervisor.pid is None:
        return True
    try:
        os.kill(supervisor.pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while supervisor.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not supervisor.alive():
        return True
    kill_tree(supervisor.pid)
    return False
