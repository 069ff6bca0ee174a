"""`python -m agent_runner.eval`: the eval pod's entry point, against a real swerex-remote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runner.eval.harness import EvalReport, EvalRequest
from swerollout import instances
from swerollout_dev import tasks
from tests.support.evalkit import start_swerex


def test_cli_evaluates_and_reports_json(
    bundled: dict[str, instances.SWEBenchInstance], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    instance = bundled["spanlib-merge"]
    checkout = tasks.checkout(instance.image, instance.base_commit, tmp_path / "checkout")
    # builtin grader: a fresh process would spend seconds importing swebench's harness.
    request = EvalRequest(
        instance=instances.to_api_instance(instance), patch=instance.patch, workdir=str(checkout), grader="builtin"
    )
    (tmp_path / "request.json").write_text(request.model_dump_json())
    handle = start_swerex(checkout)
    try:
        (tmp_path / "token").write_text(handle.token + "\n")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent_runner.eval",
                "--request",
                str(tmp_path / "request.json"),
                "--sandbox-url",
                handle.url,
                "--token-file",
                str(tmp_path / "token"),
                "--out",
                str(tmp_path / "report.json"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        (tmp_path / "bad-token").write_text("not-the-token")
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent_runner.eval",
                "--request",
                str(tmp_path / "request.json"),
                "--sandbox-url",
                handle.url,
                "--token-file",
                str(tmp_path / "bad-token"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        handle.stop()
    assert done.returncode == 0, done.stderr
    report = EvalReport.model_validate(json.loads((tmp_path / "report.json").read_text()))
    assert report.resolved and report.reward == 1.0 and report.backend == "builtin"
    assert report.fail_to_pass.success == instance.FAIL_TO_PASS
    assert "resolved: FAIL_TO_PASS 3/3, PASS_TO_PASS 6/6 (builtin)" in done.stderr
    assert refused.returncode == 2
    assert "rejected the auth token" in refused.stderr and refused.stdout == ""
