"""README's "To drive it by hand" block, run as a new user types it, on the embedded default.

The block brings up its own dev stack (`swerollout dev up`) in a fresh directory and ends
with `swerollout dev down`. Every line runs as written, as one bash script, in a shell
that has the checkout's `swerollout` on PATH and nothing else of ours: no KUBECONFIG, no
kubectl (the block's `eval "$(swerollout dev env)"` brings both). Before the block's last
line the README's "See a batch in the browser" block runs against the same stack and
the same shell variables: its two serving commands in the background, each page read
over HTTP, then Ctrl-C, as a user stops them. `dev down` runs in any case.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from tests.support.docblocks import blocks_run_by

THIS_TEST = "tests/e2e/test_readme_by_hand.py::test_the_readme_by_hand_block_as_written"
# dev up, four oracle rollouts on a loaded two-core machine, dev down.
pytestmark = pytest.mark.timeout(1500)


def _user_env() -> dict[str, str]:
    """A login shell's environment with the venv's commands on PATH, nothing of a dev stack."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SWEROLLOUT_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return env


def _bash(script: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _serve_and_read(command: str, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """Start a serving `swerollout view` line, read its batch page's data over HTTP, Ctrl-C it."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"at (http://\S+/)", first)
        assert match, f"{command}: {first}{proc.stderr.read() if proc.poll() is not None and proc.stderr else ''}"
        url = match.group(1)
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        summary: dict[str, object] = httpx.get(url + "api/batch", timeout=120).json()
        return summary
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, f"{command} did not stop on Ctrl-C with 0"


def test_the_readme_by_hand_block_as_written(tmp_path: Path) -> None:
    block, view_block = blocks_run_by("README.md", THIS_TEST)
    assert block.commands() == [
        "swerollout tasks materialize --dest tasks",
        "swerollout dev up --policy oracle --tasks tasks/instances.jsonl",
        'eval "$(swerollout dev env)"',
        "swerollout submit -f tasks/instances.jsonl --limit 2 --group-size 2 --batch try1 "
        '--endpoint "$SWEROLLOUT_ENDPOINT" --admin-key-secret "$SWEROLLOUT_ADMIN_KEY_SECRET" --tokenizer qwen-2.5',
        "swerollout watch --batch try1",
        "swerollout results --batch try1 --out try1.parquet",
        "kubectl get swer",
        "swerollout logs try1-0-0-a1 -c runner",
        "swerollout view --batch try1 --out try1.html",
        "swerollout dev down",
    ], "the README's block changed: make this test follow it"
    assert view_block.commands() == [
        "swerollout view --from try1.parquet",
        "swerollout view --batch try1",
        "swerollout view --from try1.parquet --out try1.html",
    ], "the README's view block changed: make this test follow it"
    home = tmp_path / "user"
    home.mkdir()
    env = _user_env()
    lines = block.text.rstrip("\n").split("\n")
    down = lines.pop()
    assert down.split("  #")[0].strip() == "swerollout dev down"
    dumped = tmp_path / "shell.env"
    try:
        # The block up to `dev down`, then the shell's variables as it left them.
        session = _bash("\n".join(lines) + f"\nenv -0 > {dumped}\n", home, env, timeout=1200)
        assert session.returncode == 0, session.stdout[-4000:] + session.stderr[-4000:]
        out = session.stdout
        shell = dict(item.split("=", 1) for item in dumped.read_text().split("\0") if "=" in item)

        # `dev env` made the stack's connection the shell's.
        assert shell["KUBECONFIG"] == str(home / ".swerollout" / "dev" / "kubeconfig")
        assert shell["SWEROLLOUT_ENDPOINT"].startswith("http://127.0.0.1:")
        assert (
            shell["SWEROLLOUT_INFERENCE_ADMIN_KEY"]
            == (home / ".swerollout" / "dev" / "inference-admin.key").read_text().strip()
        )

        # Succeeded rows: the oracle solves both tasks in both members.
        table = pq.read_table(home / "try1.parquet").to_pylist()
        assert sorted(r["name"] for r in table) == ["try1-0-0", "try1-0-1", "try1-1-0", "try1-1-1"]
        assert {(r["phase"], r["status"], r["reward"], r["resolved"]) for r in table} == {
            ("Succeeded", "completed", 1.0, True)
        }
        assert all(r["response_ids"] and sum(r["loss_mask"]) > 0 for r in table)
        assert "wrote 4 rollouts of batch try1 to try1.parquet (4 completed)" in out
        # kubectl came from `dev env`'s PATH and reads the stack.
        rows = [line.split() for line in out.splitlines() if line.startswith("try1-")]
        assert sorted(row[0] for row in rows if "Succeeded" in row) == [
            "try1-0-0",
            "try1-0-1",
            "try1-1-0",
            "try1-1-1",
        ], out
        # The viewer page, from the cluster (the dev store found without a flag).
        assert "wrote 4 rollouts to try1.html" in out
        page = (home / "try1.html").read_text()
        assert "try1-0-0" in page and "try1-1-1" in page

        view_env = {**env, **shell}
        view = view_block.commands()
        for serving in view[:2]:
            summary = _serve_and_read(serving, home, view_env)
            assert summary["total"] == 4 and summary["resolved"] == 4, json.dumps(summary)[:2000]
        shared = _bash(view[2], home, view_env, timeout=300)
        assert shared.returncode == 0 and "wrote 4 rollouts to try1.html" in shared.stdout, shared.stderr
    finally:
        stopped = _bash(down, home, env, timeout=300)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped" in stopped.stdout
