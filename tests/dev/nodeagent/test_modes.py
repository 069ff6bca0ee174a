"""The rollout pod shape (bundle init container + sandbox + runner) and the unisolated fallback."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from swerollout.kube import EVENTS, PODS, SECRETS, KubeClient
from swerollout_dev.controlplane import free_port
from swerollout_dev.nodeagent.layout import container_logs, find_pod_dirs
from tests.support.nodeagent_support import AgentProcess, phase_is, pod_manifest, wait_pod

RUNNER = "swerollout:dev"


def git_repo(path: Path) -> str:
    path.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "mod.py").write_text("X = 1\n")
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "one"], check=True, env=env)
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


def test_rollout_shaped_pod_serves_swerex_from_the_bundle_in_the_checkout(
    agent: AgentProcess, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    commit = git_repo(tmp_path / "task")
    port = free_port()
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "data": {"swerex-key": base64.b64encode(b"sk").decode(), "ingest-token": base64.b64encode(b"it").decode()},
        },
        namespace,
    )
    secrets_dir = "/var/run/secrets/swerollout"
    pod = pod_manifest(
        "rollout",
        agent.node,
        [
            {
                "name": "sandbox",
                "image": f"file://{tmp_path / 'task'}",
                "workingDir": "/testbed",
                "command": ["/swerex/bin/swerex-serve"],
                "env": [
                    {"name": "SWEREX_PORT", "value": str(port)},
                    {"name": "SWEREX_AUTH_TOKEN_FILE", "value": f"{secrets_dir}/swerex-key"},
                    {"name": "SWEROLLOUT_BASE_COMMIT", "value": commit},
                ],
                "volumeMounts": [
                    {"name": "bundle", "mountPath": "/swerex", "readOnly": True},
                    {"name": "sandbox-credentials", "mountPath": secrets_dir, "readOnly": True},
                ],
                # declared: the sandbox has a network namespace of its own, reachable at the pod IP on its ports only
                "ports": [{"name": "swerex", "containerPort": port}],
                "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
            },
            {
                "name": "runner",
                "image": RUNNER,
                "command": ["python", "-c", "import time; time.sleep(120)"],
                "volumeMounts": [{"name": "runner-credentials", "mountPath": secrets_dir, "readOnly": True}],
            },
        ],
        restartPolicy="Never",
        volumes=[
            {"name": "bundle", "emptyDir": {}},
            {
                "name": "sandbox-credentials",
                "secret": {
                    "secretName": "creds",
                    "defaultMode": 0o440,
                    "items": [{"key": "swerex-key", "path": "swerex-key"}],
                },
            },
            {"name": "runner-credentials", "secret": {"secretName": "creds", "defaultMode": 0o440}},
        ],
        initContainers=[
            {
                "name": "bundle",
                "image": RUNNER,
                "command": ["swerollout", "sandbox-bundle", "install", "--dest", "/swerex"],
                "volumeMounts": [{"name": "bundle", "mountPath": "/swerex"}],
            }
        ],
    )
    kube.create(PODS, pod, namespace)
    ready = wait_pod(
        kube,
        namespace,
        "rollout",
        lambda p: (
            bool(p) and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ),
        timeout=60,
    )
    # swerex-serve binds the pod's own loopback address (SWEROLLOUT_POD_LOOPBACK), which is its podIP
    with httpx.Client(
        base_url=f"http://{ready['status']['podIP']}:{port}", headers={"X-API-Key": "sk"}, timeout=30
    ) as http:
        result = http.post(
            "/execute",
            json={
                "command": f"git rev-parse HEAD; cat mod.py; ls {secrets_dir}; cat /proc/1/cmdline | tr '\\0' ' '",
                "shell": True,
            },
        ).json()
    lines = result["stdout"].splitlines()
    assert lines[:3] == [commit, "X = 1", "swerex-key"], result
    kube.delete(PODS, "rollout", namespace, grace_period_seconds=2)
    wait_pod(kube, namespace, "rollout", lambda p: not p, timeout=30)


def test_without_bubblewrap_the_pod_says_it_is_unisolated_and_maps_mount_paths(
    agent_factory: Callable[..., AgentProcess], kube: KubeClient, namespace: str
) -> None:
    agent = agent_factory("--isolation", "none")
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tok"},
            "data": {"token": base64.b64encode(b"abc").decode()},
        },
        namespace,
    )
    kube.create(
        PODS,
        pod_manifest(
            "plain",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "workingDir": "/work",
                    "command": [
                        "sh",
                        "-c",
                        'cat "$SWEROLLOUT_MOUNT_ROOT/etc/tok/token"; echo; pwd; test -e /etc/tok || echo no-real-path',
                    ],
                    "volumeMounts": [{"name": "tok", "mountPath": "/etc/tok"}],
                }
            ],
            restartPolicy="Never",
            volumes=[{"name": "tok", "secret": {"secretName": "tok"}}],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "plain", phase_is("Succeeded", "Failed"))
    [pod_dir] = find_pod_dirs(agent.root, namespace, "plain")
    out = container_logs(pod_dir, "main")[-1].read_text().splitlines()
    assert pod["status"]["phase"] == "Succeeded", out
    mount_root = pod_dir / "containers" / "main" / "root"
    assert out == ["abc", str(mount_root / "work"), "no-real-path"]
    isolated = next(c for c in pod["status"]["conditions"] if c["type"] == "swerollout.io/Isolated")
    assert isolated["status"] == "False" and isolated["reason"] == "Unisolated"
    assert "SWEROLLOUT_MOUNT_ROOT" in isolated["message"]
    events = kube.list(EVENTS, namespace, field_selector="involvedObject.name=plain")["items"]
    assert any(e["reason"] == "RunningUnisolated" and e["type"] == "Warning" for e in events)
