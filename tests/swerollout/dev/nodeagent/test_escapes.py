"""Known escape techniques, run from inside a sandbox container of a rollout-shaped pod, all fail.

The runner container beside it holds a token (in a mounted Secret and in its
environment); the sandbox tries to read it, to open files by handle, to mount,
to create device nodes, to use the kernel's keyring, bpf and ptrace.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import subprocess
from pathlib import Path

from swerollout.dev.nodeagent.layout import container_logs, find_pod_dirs
from swerollout.kube import PODS, SECRETS, KubeClient

from tests.support.nodeagent_support import AgentProcess, phase_is, pod_manifest, wait_pod

RUNNER = "swerollout:dev"
ATTEMPTS = Path(__file__).parents[4] / "tests" / "support" / "escape_attempts.py"


def task_repo(path: Path) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "PATH": "/usr/bin:/bin"}
    path.mkdir()
    shutil.copy(ATTEMPTS, path / "attempts.py")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "task"], check=True, env=env)


def test_escape_techniques_fail_inside_a_sandbox(
    agent: AgentProcess, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    token = secrets.token_hex(16)
    task_repo(tmp_path / "task")
    kube.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "runner-token"},
                          "data": {"ingest-token": base64.b64encode(token.encode()).decode()}}, namespace)
    secret_dir = "/var/run/secrets/swerollout"
    kube.create(PODS, pod_manifest("escape", agent.node, [
        {"name": "sandbox", "image": f"file://{tmp_path / 'task'}", "workingDir": "/testbed",
         "command": ["sh", "-c", 'while [ ! -e /sync/up ]; do sleep 0.1; done; exec python3 attempts.py "$0"', token[::-1]],
         "volumeMounts": [{"name": "sync", "mountPath": "/sync", "readOnly": True}]},
        {"name": "runner", "image": RUNNER,
         "command": ["sh", "-c", "touch /sync/up; sleep 120"],
         "env": [{"name": "INGEST_TOKEN", "value": token}],
         "volumeMounts": [{"name": "token", "mountPath": secret_dir, "readOnly": True},
                          {"name": "sync", "mountPath": "/sync"}]},
    ], restartPolicy="Never", volumes=[
        {"name": "token", "secret": {"secretName": "runner-token", "defaultMode": 0o440}},
        {"name": "sync", "emptyDir": {}},
    ]), namespace)
    try:
        wait_pod(kube, namespace, "escape", lambda p: p.get("status", {}).get("containerStatuses") is not None and any(
            c["name"] == "sandbox" and "terminated" in c["state"] for c in p["status"]["containerStatuses"]), timeout=90)
        [pod_dir] = find_pod_dirs(agent.root, namespace, "escape")
        out = container_logs(pod_dir, "sandbox")[-1].read_text()
        # the script gets the token reversed on its command line, so finding that is not finding the token
        report = json.loads(out.strip().splitlines()[-1])
        assert set(report) >= {"open_by_handle_at", "proc_secret", "mount", "mknod", "syscalls", "capabilities"}, out
        assert {k: v for k, v in report.items() if v != "blocked"} == {}, out
    finally:
        kube.delete(PODS, "escape", namespace, grace_period_seconds=1)
        wait_pod(kube, namespace, "escape", lambda p: not p, timeout=30)
