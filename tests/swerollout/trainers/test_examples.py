"""examples/trainers/*.py run as a user runs them, on the shared embedded default: one
task, one member each (the hooks themselves are tested in test_verl.py and test_areal.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from swerollout.tokenizers import resolve_tokenizer_dir
from tests.swerollout.trainers.conftest import Shared

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "trainers"


def run_example(shared: Shared, script: str, *args: str) -> dict[str, object]:
    stack = shared.stack
    common = [
        "--instances", str(stack.workdir / "tasks" / "instances.jsonl"), "--endpoint", stack.oracle_url,
        "--kubeconfig", str(stack.paths.kubeconfig), "--store-url", stack.store_dir.as_uri(),
    ]
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *common, *args], capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def test_verl_step_example(shared: Shared) -> None:
    summary = run_example(
        shared, "verl_step.py", "--n", "1", "--step", "4", "--model-path", str(resolve_tokenizer_dir("qwen-2.5")),
    )
    assert summary["rows"] == 1 and summary["status"] == ["completed"]
    assert summary["rewards"] == [1.0] and int(str(summary["sampled_tokens"])) > 0


def test_areal_episode_example(shared: Shared) -> None:
    summary = run_example(shared, "areal_episode.py", "--group-size", "1", "--task", "1", "--version", "5")
    assert summary["shape"][0] == 1 and summary["rewards"] == [1.0]  # type: ignore[index]
    assert summary["versions"] == [5]
