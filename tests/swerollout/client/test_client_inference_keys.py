"""abort(batch) sends its one abort_all per server with the server's admin key (SGLang's
--admin-api-key), from the argument, the client's option or $SWEROLLOUT_INFERENCE_ADMIN_KEY."""

from __future__ import annotations

import logging

import pytest

from swerollout.client import RolloutClient, aclient
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.policy_server.launch import PolicyServerHandle
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances


def _refusals(caplog: pytest.LogCaptureFixture) -> int:
    return sum("refused the abort (HTTP 401)" in r.getMessage() for r in caplog.records)


def test_batch_abort_carries_the_admin_key(
    crd: ControlPlane,
    namespace: str,
    keyed_server: PolicyServerHandle,
    server_aborts: list[bool],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The refusal is the client's own warning to the user; keep it reaching caplog even if
    # an earlier import's dictConfig (disable_existing_loggers) switched the logger off.
    monkeypatch.setattr(aclient.log, "disabled", False)
    caplog.set_level(logging.WARNING, logger=aclient.log.name)
    monkeypatch.delenv("SWEROLLOUT_INFERENCE_ADMIN_KEY", raising=False)
    inference = {"endpoint": keyed_server.url, "tokenizer": "qwen-2.5"}
    instances = load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:1]
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as client:
        names = client.submit_batch(instances, 1, batch="keys", inference=inference)
        # Without the key the server refuses (401): said once, and the members are still marked.
        assert client.abort("keys") == names
        assert (_refusals(caplog), len(server_aborts)) == (1, 0)
        client.resume("keys")
        assert client.abort("keys", admin_key="k-admin") == names
        assert (_refusals(caplog), len(server_aborts)) == (1, 1)
        client.resume("keys")
    monkeypatch.setenv("SWEROLLOUT_INFERENCE_ADMIN_KEY", "k-admin")
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as client:
        assert client.abort("keys") == names
    assert (_refusals(caplog), len(server_aborts)) == (1, 2)


def test_cli_submit_names_the_key_secrets(crd: ControlPlane, namespace: str) -> None:
    import os
    import subprocess
    import sys

    from swerollout.kube import SWEROLLOUTS, KubeClient

    def submit(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "swerollout.cli.main",
                "submit",
                "-f",
                str(DEFAULT_TASKS_DIR / "instances.jsonl"),
                "--limit",
                "1",
                "-G",
                "1",
                "--batch",
                "cli-keys",
                "--endpoint",
                "http://127.0.0.1:9",
                "--tokenizer",
                "qwen-2.5",
                "-n",
                namespace,
                *extra,
            ],
            env={**os.environ, "KUBECONFIG": str(crd.kubeconfig_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = submit("--admin-key-secret", "just-a-name")
    assert bad.returncode != 0 and "--admin-key-secret" in bad.stderr and "SECRET/KEY" in bad.stderr, bad.stderr
    done = submit("--api-key-secret", "sglang-keys/api-key", "--admin-key-secret", "sglang-keys/admin-key")
    assert done.returncode == 0, done.stderr
    with KubeClient.from_kubeconfig(crd.kubeconfig_path) as kube:
        [item] = kube.list(SWEROLLOUTS, namespace)["items"]
    inference = item["spec"]["inference"]
    assert inference["apiKeySecretRef"] == {"name": "sglang-keys", "key": "api-key"}
    assert inference["adminKeySecretRef"] == {"name": "sglang-keys", "key": "admin-key"}
