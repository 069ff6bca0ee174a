"""`swerollout policy-server` as a real subprocess: flags, ready line, SIGTERM, config errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from swerollout_dev.policy_server import LaunchError, launch
from tests.support.ps_support import TOKENIZER


def test_cli_serves_with_flags_and_stops_on_sigterm(tasks_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = launch(
        "oracle",
        subprocess=True,
        tasks=tasks_file,
        tokenizer=TOKENIZER,
        weight_version="cli-v1",
        faults={"fail_next": 1, "abort_after_tokens": 3},
        log_file=log,
    )
    try:
        assert server.url.startswith("http://127.0.0.1:")
        body = {"input_ids": [9707, 11], "sampling_params": {"max_new_tokens": 50}}
        assert httpx.post(server.url + "/generate", json=body, timeout=60).status_code == 503
        reply = httpx.post(server.url + "/generate", json=body, timeout=60).json()
        assert reply["meta_info"]["finish_reason"]["type"] == "abort" and len(reply["output_ids"]) == 3
        assert reply["meta_info"]["weight_version"] == "cli-v1"
        info = httpx.get(server.url + "/get_server_info", timeout=60).json()
        assert info["policy"] == "oracle" and info["tasks"] == str(tasks_file)
    finally:
        server.stop()
    assert server.process.returncode == 0  # SIGTERM is a clean shutdown
    output = log.read_text()
    assert "ready at " + server.url in output
    assert "completion=3 finish=abort version=cli-v1" in output  # one log line per request
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", timeout=5)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "swerollout.cli.main", "policy-server", "--port", "0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_cli_rejects_unknown_policy_listing_valid_ones() -> None:
    result = run_cli("--policy", "gpt-9")
    assert result.returncode == 2
    assert "unknown policy 'gpt-9'" in result.stderr and "null, oracle, tiny-lm" in result.stderr


def test_oracle_without_tasks_fails_with_the_fix(tmp_path: Path) -> None:
    result = run_cli("--policy", "oracle", "--tokenizer", TOKENIZER)
    assert result.returncode == 2 and "needs --tasks FILE" in result.stderr
    result = run_cli("--policy", "oracle", "--tasks", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "missing.jsonl does not exist" in result.stderr
    with pytest.raises(LaunchError, match="tasks file .* holds no instances"):
        empty = tmp_path / "empty.jsonl"
        empty.write_text("\n")
        launch("oracle", tasks=empty, tokenizer=TOKENIZER)
