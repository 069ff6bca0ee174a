"""The client commands as a user runs them: `python -m swerollout.cli.main ...` in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from swerollout.kube import SWEROLLOUTBATCHES, SWEROLLOUTS, AsyncKubeClient
from swerollout.store import ResultStore
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances
from tests.support.client_support import finish, make_trajectory, run

ROOT = Path(__file__).resolve().parents[3]
INSTANCES = DEFAULT_TASKS_DIR / "instances.jsonl"


def cli_env(plane: ControlPlane) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(plane.kubeconfig_path), "COLUMNS": "200"}


def swerollout(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args],
        env=cli_env(plane),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def submit_args(namespace: str, batch: str, group: int = 2) -> list[str]:
    return [
        "submit",
        "-f",
        str(INSTANCES),
        "--group-size",
        str(group),
        "--batch",
        batch,
        "--endpoint",
        "http://127.0.0.1:9",
        "--tokenizer",
        "qwen-2.5",
        "--mode",
        "validate",
        "-n",
        namespace,
    ]


async def test_submit_list_get_abort_resume(crd: ControlPlane, akube: AsyncKubeClient, namespace: str) -> None:
    count = len(load_instances(INSTANCES))
    done = await asyncio.to_thread(swerollout, crd, *submit_args(namespace, "cli"), "--on-abort", "Keep")
    assert done.returncode == 0, done.stderr
    assert f"{count * 2} rollouts" in done.stdout
    again = await asyncio.to_thread(swerollout, crd, *submit_args(namespace, "cli"), "--on-abort", "Keep")
    assert again.returncode == 0, again.stderr
    items = (await akube.list(SWEROLLOUTS, namespace))["items"]
    assert len(items) == count * 2 and all(o["spec"]["mode"] == "validate" for o in items)
    assert all(o["spec"]["inference"]["onAbort"] == "Keep" for o in items)

    await run(akube, namespace, "cli-0-1", generated=1234)
    listed = await asyncio.to_thread(swerollout, crd, "list", "--batch", "cli", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if line.startswith("cli-")]
    assert len(lines) == count * 2
    assert any(line.split()[:3] == ["cli-0-1", "cli", "Running"] and "1234" in line.split() for line in lines)

    got = await asyncio.to_thread(swerollout, crd, "get", "cli-0-1", "-n", namespace)
    assert got.returncode == 0, got.stderr
    assert "Running" in got.stdout and load_instances(INSTANCES)[0].instance_id in got.stdout
    raw = await asyncio.to_thread(swerollout, crd, "get", "cli-0-1", "-n", namespace, "-o", "json")
    assert json.loads(raw.stdout)["metadata"]["name"] == "cli-0-1"

    aborted = await asyncio.to_thread(swerollout, crd, "abort", "--batch", "cli", "-n", namespace)
    assert aborted.returncode == 0 and f"{count * 2} rollout(s)" in aborted.stdout
    assert (await akube.get(SWEROLLOUTBATCHES, "cli", namespace))["spec"]["suspend"] is True
    again = await asyncio.to_thread(swerollout, crd, "abort", "--batch", "cli", "-n", namespace)
    assert again.returncode == 0 and "is already suspended" in again.stdout, again.stdout
    resumed = await asyncio.to_thread(swerollout, crd, "resume", "--batch", "cli", "-n", namespace)
    assert resumed.returncode == 0 and f"{count * 2} rollout(s)" in resumed.stdout, resumed.stderr
    assert (await akube.get(SWEROLLOUTBATCHES, "cli", namespace))["spec"]["suspend"] is False
    assert not any(o["spec"]["suspend"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"])


async def test_watch_follows_until_done_and_exits_1_on_failures(
    crd: ControlPlane, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    done = await asyncio.to_thread(swerollout, crd, *submit_args(namespace, "wb", group=1))
    assert done.returncode == 0, done.stderr
    names = sorted(o["metadata"]["name"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"])
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "swerollout.cli.main",
        "watch",
        "--batch",
        "wb",
        "-n",
        namespace,
        "--rollouts",
        env=cli_env(crd),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await asyncio.sleep(1.0)
        assert watcher.returncode is None
        for i, name in enumerate(names):
            phase = "Failed" if i == 0 else "Succeeded"
            await finish(akube, store, namespace, name, trajectory=make_trajectory(i), phase=phase, reward=float(i % 2))
        stdout, stderr = await asyncio.wait_for(watcher.communicate(), timeout=60)
    finally:
        if watcher.returncode is None:
            watcher.kill()
            await watcher.wait()
    text = stdout.decode()
    assert watcher.returncode == 1, stderr.decode()
    # The closing line counts trainer statuses, as `results` and the client's records do.
    assert f"batch wb: {len(names)}/{len(names)} finished, {len(names) - 1} completed, 1 failed" in text
    # It exits cleanly: no task of the portal's loop is left pending (asyncio would say so on stderr).
    assert "Task was destroyed" not in stderr.decode() and "Traceback" not in stderr.decode(), stderr.decode()
    assert all(name in text for name in names)
    assert f"failed: {names[0]}: submitted" in text


async def test_watch_ends_quietly_on_ctrl_c(crd: ControlPlane, akube: AsyncKubeClient, namespace: str) -> None:
    """Ctrl-C while the batch still runs: exit 130 at once, nothing on stderr (no traceback,
    no "Task was destroyed but it is pending!" from the client's background loop)."""
    done = await asyncio.to_thread(swerollout, crd, *submit_args(namespace, "wc", group=1))
    assert done.returncode == 0, done.stderr
    # A suite started in the background of a non-interactive shell inherits SIGINT ignored.
    # As in a terminal, the live table is drawn as it changes (rich draws it at exit on a pipe).
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "swerollout.cli.main",
        "watch",
        "--batch",
        "wc",
        "-n",
        namespace,
        env={**cli_env(crd), "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert watcher.stdout is not None
        shown = b""
        while b"batch wc" not in shown:  # the live table is up: the watch and its loop run
            chunk = await asyncio.wait_for(watcher.stdout.read(4096), timeout=120)
            assert chunk, "watch exited before showing the batch"
            shown += chunk
        watcher.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(watcher.communicate(), timeout=60)
    finally:
        if watcher.returncode is None:
            watcher.kill()
            await watcher.wait()
    assert watcher.returncode == 130, stderr.decode()
    assert stderr.decode().strip() == "", stderr.decode()


async def test_results_export_parquet_and_jsonl(
    crd: ControlPlane, akube: AsyncKubeClient, store: ResultStore, store_url: str, namespace: str, tmp_path: Path
) -> None:
    done = await asyncio.to_thread(swerollout, crd, *submit_args(namespace, "res", group=2))
    assert done.returncode == 0, done.stderr
    names = sorted(o["metadata"]["name"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"])
    expected = {}
    for i, name in enumerate(names):
        expected[name] = make_trajectory(100 + i, "exit_context" if i == 1 else "submitted")
        report = {"instance_id": name, "fail_to_pass": {"success": ["test_a"], "failure": []}} if i == 0 else None
        await finish(akube, store, namespace, name, trajectory=expected[name], reward=0.5, report=report)

    parquet = tmp_path / "out" / "res.parquet"
    exported = await asyncio.to_thread(
        swerollout, crd, "results", "--batch", "res", "--out", str(parquet), "--store-url", store_url, "-n", namespace
    )
    assert exported.returncode == 0, exported.stderr
    rows = pq.read_table(parquet).to_pylist()
    assert [r["name"] for r in rows] == names
    for row in rows:
        trajectory = expected[row["name"]]
        assert row["prompt_ids"] == trajectory.prompt_ids and row["response_ids"] == trajectory.response_ids
        assert row["loss_mask"] == trajectory.loss_mask and row["logprobs"] == trajectory.logprobs
        assert row["weight_versions"] == trajectory.weight_versions
        assert json.loads(row["messages"]) == trajectory.messages
        assert row["reward"] == 0.5 and row["tokenizer"] == "qwen-2.5"
        assert json.loads(row["info"]) == trajectory.info and json.loads(row["timings"]) == trajectory.timings
        assert {"created", "completed"} <= set(json.loads(row["times"]))
    # The full eval report travels with the record (one member has one).
    assert json.loads(rows[0]["report"])["fail_to_pass"] == {"success": ["test_a"], "failure": []}
    assert json.loads(rows[1]["report"]) is None
    assert [r["status"] for r in rows[:2]] == ["completed", "truncated"]

    jsonl = tmp_path / "res.jsonl"
    exported = await asyncio.to_thread(
        swerollout, crd, "results", "--batch", "res", "-o", str(jsonl), "--store-url", store_url, "-n", namespace
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["name"], r["response_ids"], r["status"]) for r in lines] == [
        (r["name"], r["response_ids"], r["status"]) for r in rows
    ]

    # A failed member makes the export exit 1 (the file is still written).
    await finish(akube, store, namespace, names[0], trajectory=expected[names[0]], phase="Failed")
    exported = await asyncio.to_thread(
        swerollout, crd, "results", "--batch", "res", "-o", str(jsonl), "--store-url", store_url, "-n", namespace
    )
    assert exported.returncode == 1 and "1 failed" in exported.stdout
    assert json.loads(jsonl.read_text().splitlines()[0])["status"] == "failed"


def test_usage_errors_exit_2_with_a_clear_message(crd: ControlPlane, namespace: str, tmp_path: Path) -> None:
    unknown = swerollout(crd, "watch", "--batch", "nope", "-n", namespace)
    assert unknown.returncode == 2 and "batch 'nope' has no SWERollouts" in unknown.stderr
    no_rollout = swerollout(crd, "get", "nope-0-0", "-n", namespace)
    assert no_rollout.returncode == 2 and "no SWERollout named 'nope-0-0'" in no_rollout.stderr
    wrong_ns = swerollout(crd, "list", "-n", "no-such-namespace")
    assert wrong_ns.returncode == 2 and "no-such-namespace" in wrong_ns.stderr
    bad_file = swerollout(
        crd, *submit_args(namespace, "x")[:2], str(tmp_path / "missing.jsonl"), *submit_args(namespace, "x")[3:]
    )
    assert bad_file.returncode == 2 and "does not exist" in bad_file.stderr
    bad_out = swerollout(crd, "results", "--batch", "x", "--out", str(tmp_path / "x.csv"), "-n", namespace)
    assert bad_out.returncode == 2 and ".parquet or .jsonl" in bad_out.stderr
    missing_arg = swerollout(crd, "submit", "-f", str(INSTANCES), "-n", namespace)
    assert missing_arg.returncode == 2 and "--group-size" in missing_arg.stderr
    no_config = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", "list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            k: v
            for k, v in {**os.environ, "HOME": str(tmp_path)}.items()
            if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
        },
    )
    assert no_config.returncode == 2 and "KUBECONFIG" in no_config.stderr
