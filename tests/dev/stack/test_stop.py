"""`dev down` and `cluster down` stop their supervisor with one helper: SIGTERM, then the whole tree."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from swerollout_dev.nodeagent.process import start_ticks
from swerollout_dev.stack.state import ComponentState
from swerollout_dev.stack.stop import stop_supervisor

# A supervisor that starts a child, then either exits on SIGTERM or ignores it (hung).
SUPERVISOR = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[2], "w").write(str(child.pid))
if sys.argv[1] == "hung":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: (child.terminate(), child.wait(), sys.exit(0)))
time.sleep(600)
"""


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], ComponentState, int]:
    pid_file = tmp_path / f"{mode}.child"
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, mode, str(pid_file)], start_new_session=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    return proc, ComponentState(status="running", pid=proc.pid, start_ticks=start_ticks(proc.pid)), child


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_a_supervisor_that_stops_on_sigterm_stops_its_own_children(tmp_path: Path) -> None:
    proc, state, child = _start(tmp_path, "orderly")
    assert stop_supervisor(state, grace=60) is True
    assert proc.wait(timeout=10) == 0 and _gone(child)


def test_a_hung_supervisor_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    proc, state, child = _start(tmp_path, "hung")
    assert stop_supervisor(state, grace=1) is False
    assert proc.wait(timeout=10) == -9
    deadline = time.monotonic() + 30
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_a_dead_or_recycled_pid_is_left_alone(tmp_path: Path) -> None:
    proc, state, child = _start(tmp_path, "orderly")
    recycled = state.model_copy(update={"start_ticks": (state.start_ticks or 0) + 1})
    assert stop_supervisor(recycled, grace=1) is True
    assert proc.poll() is None and not _gone(child)
    assert stop_supervisor(state, grace=60) is True
