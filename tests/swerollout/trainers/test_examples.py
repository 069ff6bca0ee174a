"""examples/trainers/*.py run as a user runs them, on the shared embedded default: one
task, one member each (the hooks themselves are tested in test_verl.py, test_areal.py,
test_slime.py and test_siirl.py). All examples start together in one fixture, so their rollouts and
their imports overlap instead of adding up; each test then reads its own example's output."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from swerollout.tokenizers import resolve_tokenizer_dir
from tests.support.docblocks import blocks_run_by
from tests.swerollout.trainers.conftest import Stack

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "trainers"
SLIME_DOUBLE = "tests.support.slime_double.Sample"
# The first test waits for every example (and, run alone, for the stack to come up):
# generous on a loaded machine.
pytestmark = pytest.mark.timeout(1800)


@dataclass
class Example:
    process: subprocess.Popen[bytes]
    output: Path
    """stdout then stderr of the example (files, not pipes: nobody reads while they all run)."""

    def summary(self) -> dict[str, Any]:
        """The example's last output line (JSON), after it exited 0."""
        self.process.wait(timeout=1200)
        stdout = self.output.with_suffix(".out").read_text()
        stderr = self.output.with_suffix(".err").read_text()
        assert self.process.returncode == 0, stdout[-3000:] + stderr[-3000:]
        summary: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        return summary


def _start(output: Path, script: str, *args: str) -> Example:
    # The repository root on the path: the slime examples take the test double's Sample.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with output.with_suffix(".out").open("wb") as out, output.with_suffix(".err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), *args], cwd=ROOT, env=env, stdout=out, stderr=err
        )
    return Example(process, output)


SLIME_DOC_TEST = "tests/swerollout/trainers/test_examples.py::test_slime_rollout_function_example_with_partial_rollout"


def slime_doc_flags(instances: str, config: str) -> list[str]:
    """The flags of docs/trainers-slime.md's slime_step.py command, its `tasks/instances.jsonl`
    and `swerollout.yaml` replaced by this stack's (_start sets its PYTHONPATH=. as the root)."""
    (block,) = blocks_run_by("docs/trainers-slime.md", SLIME_DOC_TEST)
    (command,) = block.commands()
    argv = shlex.split(command)
    assert argv[:3] == ["PYTHONPATH=.", "python", "examples/trainers/slime_step.py"], argv
    flags = argv[3:]
    for flag, value in (("--prompt-data", instances), ("--custom-config-path", config)):
        flags[flags.index(flag) + 1] = value
    assert flags[flags.index("--sample-class") + 1] == SLIME_DOUBLE, "slime is not installable here"
    return flags


@pytest.fixture(scope="session")
def examples(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Example]]:
    dev = stack.stack
    instances = str(dev.workdir / "tasks" / "instances.jsonl")
    common = [
        "--instances",
        instances,
        "--endpoint",
        dev.oracle_url,
        "--kubeconfig",
        str(dev.paths.kubeconfig),
        "--store-url",
        dev.store_dir.as_uri(),
    ]
    out = tmp_path_factory.mktemp("trainer-examples")
    config = out / "swerollout.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "swerollout": {
                    "endpoints": [dev.oracle_url],
                    "tokenizer": "qwen-2.5",
                    "kubeconfig": str(dev.paths.kubeconfig),
                    "namespace": "default",
                    "store_url": dev.store_dir.as_uri(),
                    "timeout_seconds": 900,
                    "sandbox": {"startupTimeoutSeconds": 900},
                }
            }
        )
    )
    slime = [
        "--prompt-data",
        instances,
        "--custom-config-path",
        str(config),
        "--sample-class",
        SLIME_DOUBLE,
        "--n-samples-per-prompt",
        "1",
        "--rollout-max-response-len",
        "8192",
    ]
    started = {
        "verl": _start(
            out / "verl",
            "verl_step.py",
            *common,
            "--n",
            "1",
            "--step",
            "4",
            "--model-path",
            str(resolve_tokenizer_dir("qwen-2.5")),
        ),
        "areal": _start(
            out / "areal", "areal_episode.py", *common, "--group-size", "1", "--task", "1", "--version", "5"
        ),
        # docs/trainers-slime.md's command as written (its two files where this stack has them):
        # the rollout function with partial rollout over two steps; then the generate function
        # inside slime's own rollout.
        "slime_rollout": _start(out / "slime_rollout", "slime_step.py", *slime_doc_flags(instances, str(config))),
        "slime_generate": _start(
            out / "slime_generate",
            "slime_step.py",
            *slime,
            "--custom-generate-function-path",
            "swerollout.trainers.slime.generate",
            "--rollout-batch-size",
            "1",
        ),
        # siiRL's own GRPO pipeline with our rollout node, then its reward and advantage nodes.
        "siirl": _start(out / "siirl", "siirl_pipeline.py", *common, "--group-size", "1", "--task", "1", "--step", "5"),
    }
    try:
        yield started
    finally:
        for example in started.values():
            if example.process.poll() is None:
                example.process.kill()
                example.process.wait()


def test_verl_step_example(examples: dict[str, Example]) -> None:
    summary = examples["verl"].summary()
    assert summary["rows"] == 1 and summary["status"] == ["completed"]
    assert summary["rewards"] == [1.0] and int(str(summary["sampled_tokens"])) > 0


def test_areal_episode_example(examples: dict[str, Example]) -> None:
    summary = examples["areal"].summary()
    assert summary["shape"][0] == 1 and summary["rewards"] == [1.0]
    assert summary["versions"] == [5]


def _check_slime_group(group: dict[str, Any]) -> None:
    assert group["status"] == ["COMPLETED"] and group["rewards"] == [1.0]
    assert group["sampled_tokens"][0] > 0 and group["response_length"][0] >= group["sampled_tokens"][0]
    assert group["weight_versions"][0], "one entry per generate call"


def test_slime_rollout_function_example_with_partial_rollout(examples: dict[str, Example]) -> None:
    summary = examples["slime_rollout"].summary()
    steps = summary["steps"]
    # Each step over-samples two groups and returns the first whole one; the other goes back
    # to the buffer (suspended if it was still running) and is handed out first next step.
    assert [len(groups) for groups in steps] == [1, 1] and summary["buffered"] == 1
    for groups in steps:
        _check_slime_group(groups[0])
    returned = [groups[0]["group_index"] for groups in steps]
    assert len(set(returned)) == 2 and set(returned) <= {0, 1, 2}
    names = [groups[0]["rollouts"][0] for groups in steps]
    assert all(n.endswith(f"-{g}-{g}") for n, g in zip(names, returned)), names


def test_slime_generate_function_example(examples: dict[str, Example]) -> None:
    summary = examples["slime_generate"].summary()
    assert [len(groups) for groups in summary["steps"]] == [1] and summary["buffered"] == 0
    _check_slime_group(summary["steps"][0][0])


def test_siirl_pipeline_example(examples: dict[str, Example]) -> None:
    summary = examples["siirl"].summary()
    assert summary["shape"][0] == 1 and summary["status"] == ["completed"]
    assert summary["rewards"] == [1.0] and summary["sampled_tokens"] > 0
    assert summary["advantages_finite"] is True
