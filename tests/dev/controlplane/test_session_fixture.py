"""The session fixture itself: a pytest run that fails a test and is then interrupted
with Ctrl-C (SIGINT) still stops its control plane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from swerollout_dev.controlplane.processes import PIDFILE_NAME, is_alive

TESTS_DIR = Path(__file__).resolve().parents[2]

_INNER_TESTS = textwrap.dedent(
    """
    import json, os, time
    from pathlib import Path

    def test_fails(control_plane):
        assert control_plane.running
        assert False, "deliberate failure"

    def test_hangs(control_plane):
        out = Path(os.environ["PIDS_OUT"])
        out.write_text(json.dumps(control_plane.pids()))
        time.sleep(300)
    """
)


def test_failed_then_interrupted_pytest_run_stops_its_control_plane(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(_INNER_TESTS)
    pids_out = tmp_path / "pids.json"
    env = dict(
        os.environ,
        PIDS_OUT=str(pids_out),
        # Load the real top-level conftest as a plugin, so the inner run uses the same fixture.
        PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR.parent), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            f"--rootdir={tmp_path}",
            f"--basetemp={tmp_path / 'base'}",
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A suite started in the background of a non-interactive shell (nohup ... &, some CI
        # runners) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
        # give the inner run a default SIGINT, as a terminal's Ctrl-C would find it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 120
        while not pids_out.exists():
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the inner pytest never reached its hanging test"
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written in one call; let it land
        pids = json.loads(pids_out.read_text())
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert all(is_alive(p) for p in pids.values())

        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        assert "deliberate failure" in output
        assert "KeyboardInterrupt" in output
        deadline = time.monotonic() + 10
        while any(is_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(is_alive(p) for p in pids.values())
        # Only an orderly stop() removes the pidfile (the kernel's parent-death signal
        # would also kill the processes, but leave the file).
        workdirs = list((tmp_path / "base").glob("controlplane*"))
        assert workdirs and not any((w / PIDFILE_NAME).exists() for w in workdirs)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids.values():
            if is_alive(pid):
                os.killpg(pid, signal.SIGKILL)
