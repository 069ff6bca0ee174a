"""`make demo` says where its minutes go: hack/demo.sh's setup steps beside the demo's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rich.console import Console

from swerollout_dev.demo import Timeline
from tests.support.devstack import ROOT


def test_setup_steps_timed_by_the_script_join_the_demo_table(tmp_path: Path) -> None:
    times = tmp_path / "setup-times.tsv"
    times.write_text("setup: venv\t90000\nsetup: kube binaries\t1500\nnot a row\n")
    timeline = Timeline()
    timeline.add_setup_times(times)
    with timeline.step("run the batch"):
        pass
    assert [name for name, _ in timeline.steps] == ["setup: venv", "setup: kube binaries", "run the batch"]
    assert timeline.steps[0][1] == 90.0 and timeline.steps[1][1] == 1.5
    console = Console(width=120, record=True)
    console.print(timeline.table())
    shown = console.export_text()
    assert "setup: venv" in shown and "98%" in shown and "1 min 32 s" in shown, shown


def test_install_system_deps_takes_the_target_it_installs_for() -> None:
    script = str(ROOT / "hack" / "install-system-deps.sh")
    refused = subprocess.run(["bash", script, "bogus"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "usage:" in refused.stderr and "[demo|test]" in refused.stderr
    # make test installed the test set (a superset): the demo's packages are all there, nothing to do.
    done = subprocess.run(["bash", script, "demo"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
