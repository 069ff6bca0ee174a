"""docs/client.md's prepare-next-step loop, run as written on the trainer tests' shared dev
stack, in a shell that ran `eval "$(swerollout dev env)"` (as test_readme_client does): each
step's batch was prepared before its go, the next one submitted prepared while it ran, and
every record the loop trained on is a finished one."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from swerollout.kube import SWEROLLOUTBATCHES
from tests.support.devstack import dev_env_shell
from tests.support.docblocks import blocks_run_by
from tests.swerollout.trainers.conftest import Stack

THIS_TEST = "tests/swerollout/trainers/test_client_warm_loop.py::test_the_prepare_next_step_loop_as_written"
pytestmark = pytest.mark.timeout(1500)


def test_the_prepare_next_step_loop_as_written(stack: Stack) -> None:
    (block,) = blocks_run_by("docs/client.md", THIS_TEST)
    assert block.language == "python"
    for call in (
        'load_instances("tasks/instances.jsonl", limit=2)',
        'client.submit_batch(steps[0], 2, batch="warm-0", inference=inference, prepared=True)',
        'client.wait_prepared(f"warm-{step}", timeout=900)',
        'client.resume(f"warm-{step}", weight_version=f"v{step}")',
        'batch=f"warm-{step + 1}", inference=inference, prepared=True)',
        'client.wait(f"warm-{step}")',
        'train_on(client.results(f"warm-{step}"))',
    ):
        assert call in block.text, f"docs/client.md's loop changed ({call} is gone): make this test follow it"
    dev = stack.stack
    ran = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=dev.workdir,
        env=dev_env_shell(dev.workdir),
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # train_on printed each step's records: both members of its task, finished and solved.
    trained = [ast.literal_eval(line) for line in ran.stdout.strip().splitlines()]
    assert trained == [[(f"warm-{step}-0-{m}", 1.0) for m in range(2)] for step in range(2)], ran.stdout
    for step in range(2):
        for member in range(2):
            status = dev.status(f"warm-{step}-0-{member}")
            # Parked Prepared before its go; started from there (one pod), labelled with the go's version.
            assert status["phase"] == "Succeeded" and status["attempts"] == 1, status
            assert status["prepared"]["promptTokens"] > 0, status
        # The go carried the step's weight version (the batch object's, which wins over the members').
        assert dev.kube.get(SWEROLLOUTBATCHES, f"warm-{step}", "default")["spec"].get("weightVersion") == f"v{step}"
