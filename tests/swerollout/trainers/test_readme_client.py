"""README's "Trainer integration" block, run as written on the trainer tests' shared dev stack:
in the stack's folder (its bundled tasks are `tasks/instances.jsonl` there), in a shell that
ran `eval "$(swerollout dev env)"` as "To drive it by hand" does. The block submits, aborts
and resumes a batch at once, then waits and reads its records; this test reads the same
batch back and checks what the block's comments promise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swerollout.client import RolloutClient
from swerollout.kube import SWEROLLOUTBATCHES
from tests.support.devstack import dev_env_shell
from tests.support.docblocks import blocks_run_by
from tests.swerollout.trainers.conftest import Stack

THIS_TEST = "tests/swerollout/trainers/test_readme_client.py::test_the_readme_trainer_block_as_written"
BATCH = "step-0042"  # the block's batch name
pytestmark = pytest.mark.timeout(1200)


def test_the_readme_trainer_block_as_written(stack: Stack) -> None:
    (block,) = blocks_run_by("README.md", THIS_TEST)
    assert block.language == "python"
    for call in (
        'load_instances("tasks/instances.jsonl", limit=2)',
        "with RolloutClient.connect(store_url=store_url) as client:",
        f'batch="{BATCH}"',
        f'client.abort("{BATCH}")',
        f'client.resume("{BATCH}")',
        f'client.wait("{BATCH}"',
        f'client.results("{BATCH}")',
    ):
        assert call in block.text, f"the README's trainer block changed ({call} is gone): make this test follow it"
    dev = stack.stack
    env = dev_env_shell(dev.workdir)
    ran = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=dev.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=1100,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # progress=lambda p: print(p.phases): one line per change, the last one all Succeeded.
    assert ran.stdout.strip().splitlines()[-1] == str({"Succeeded": 4}), ran.stdout[-3000:]

    with RolloutClient.connect(dev.paths.kubeconfig, store_url=dev.store_dir.as_uri()) as client:
        records = client.results(BATCH)
    assert sorted(r.name for r in records) == [f"{BATCH}-{s}-{m}" for s in range(2) for m in range(2)]
    for record in records:
        assert record.status.value == "completed" and record.reward == 1.0, record.name
        assert len(record.loss_mask) == len(record.response_ids) and record.sampled_tokens > 0
    # abort and resume were each one write of the batch's spec.suspend; the last one stands.
    assert dev.kube.get(SWEROLLOUTBATCHES, BATCH, "default")["spec"].get("suspend") is False
