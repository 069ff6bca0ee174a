"""Known escape techniques, run from inside a sandbox container of a rollout-shaped pod, all fail.

The runner container beside it holds a token (in a mounted Secret and in its
environment) and the inference server's API and admin keys (mounted as the
operator's pod spec mounts spec.inference's key Secrets); the sandbox tries to
read them, to open files by handle, to mount, to create device nodes, to use the kernel's keyring, bpf and ptrace, and to reach
a host service that the runner can reach (as it reaches the ingest API) and the
admin routes of the policy server.
"""

from __future__ import annotations

import base64
import errno
import http.server
import json
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swerollout.kube import PODS, SECRETS, KubeClient
from swerollout_dev.controlplane import free_port
from swerollout_dev.nodeagent.layout import container_logs, find_pod_dirs
from swerollout_dev.stack.supervisor import DEFAULT_POLICY_PORT
from tests.support.nodeagent_support import AgentProcess, pod_manifest, wait_pod

RUNNER = "swerollout:dev"
ATTEMPTS = Path(__file__).parents[3] / "tests" / "support" / "escape_attempts.py"


def task_repo(path: Path) -> None:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "PATH": "/usr/bin:/bin",
    }
    path.mkdir()
    shutil.copy(ATTEMPTS, path / "attempts.py")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "task"], check=True, env=env)


class _Ingest(http.server.BaseHTTPRequestHandler):
    """Stands in for the host services a runner may reach (ingest API, policy server)."""

    def do_POST(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host service")

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def host_daemon_socket() -> Iterator[str]:
    """A listening unix socket where host daemons keep theirs (`cluster up`'s containerd: /run/swerollout-cluster)."""
    directory = Path("/run") / f"swerollout-escape-{secrets.token_hex(4)}"
    directory.mkdir(mode=0o755)
    path = directory / "containerd.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(8)
        yield str(path)
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def host_service() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ingest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_escape_techniques_fail_inside_a_sandbox(
    agent_factory: Callable[..., AgentProcess],
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    host_service: int,
    host_daemon_socket: str,
) -> None:
    agent = agent_factory("--egress", f"127.0.0.1:{host_service}")
    token = secrets.token_hex(16)
    api_key, admin_key = secrets.token_hex(16), secrets.token_hex(16)
    swerex_port = free_port()
    keys_dir = "/var/run/secrets/swerollout-inference"  # as swerollout_operator.podspec mounts them
    runner_checks = (
        "import os, socket, time, urllib.request\n"
        f"def get(url):\n    return urllib.request.urlopen(url, timeout=10).read().decode()\n"
        "deadline = time.time() + 60\n"
        "while True:\n"
        "    try:\n"
        f"        sandbox = get('http://' + os.environ['SWEROLLOUT_POD_LOOPBACK'] + ':{swerex_port}/attempts.py')[:3]; break\n"
        "    except OSError:\n"
        "        if time.time() > deadline: raise\n"
        "        time.sleep(0.2)\n"
        f"print('runner reaches sandbox:', sandbox, '| host service:', get('http://127.0.0.1:{host_service}/'), flush=True)\n"
        # The runner sees the host's file system read-only, but not /run, where host daemons
        # (a real cluster's containerd) keep their sockets: read-only mounts do not stop connect().
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({host_daemon_socket!r}); print('runner reaches the host daemon', flush=True)\n"
        "except OSError as exc:\n    print('runner cannot reach the host daemon:', exc.errno, flush=True)\n"
        f"keys = [open({keys_dir!r} + '/' + k + '/key').read() for k in ('api', 'admin')]\n"
        "print('runner reads the inference keys:', [len(k) for k in keys], flush=True)\n"
        "open('/sync/up', 'w').close()\n"
        "time.sleep(120)\n"
    )
    task_repo(tmp_path / "task")
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "runner-token"},
            "data": {"ingest-token": base64.b64encode(token.encode()).decode()},
        },
        namespace,
    )
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "inference-keys"},
            "stringData": {"api-key": api_key, "admin-key": admin_key},
        },
        namespace,
    )
    secret_dir = "/var/run/secrets/swerollout"
    kube.create(
        PODS,
        pod_manifest(
            "escape",
            agent.node,
            [
                {
                    "name": "sandbox",
                    "image": f"file://{tmp_path / 'task'}",
                    "workingDir": "/testbed",
                    "command": [
                        "sh",
                        "-c",
                        'python3 -m http.server -b "$SWEROLLOUT_POD_LOOPBACK" "$1" >/dev/null 2>&1 & '
                        'while [ ! -e /sync/up ]; do sleep 0.1; done; exec python3 attempts.py "$0" "$2" "$3" "$4" "$5"',
                        ",".join((token, api_key, admin_key))[::-1],
                        str(swerex_port),
                        f"127.0.0.1:{host_service}/ingest",
                        f"127.0.0.1:{host_service}/abort_request",
                        f"127.0.0.1:{DEFAULT_POLICY_PORT}/update_weights_from_disk",
                        f"unix:{host_daemon_socket}",
                    ],
                    "ports": [{"containerPort": swerex_port, "name": "swerex"}],
                    "volumeMounts": [{"name": "sync", "mountPath": "/sync", "readOnly": True}],
                },
                {
                    "name": "runner",
                    "image": RUNNER,
                    "command": ["python", "-c", runner_checks],
                    "env": [{"name": "INGEST_TOKEN", "value": token}],
                    "volumeMounts": [
                        {"name": "token", "mountPath": secret_dir, "readOnly": True},
                        {"name": "inference-api-key", "mountPath": f"{keys_dir}/api", "readOnly": True},
                        {"name": "inference-admin-key", "mountPath": f"{keys_dir}/admin", "readOnly": True},
                        {"name": "sync", "mountPath": "/sync"},
                    ],
                },
            ],
            restartPolicy="Never",
            volumes=[
                {"name": "token", "secret": {"secretName": "runner-token", "defaultMode": 0o440}},
                *(
                    {
                        "name": f"inference-{kind}-key",
                        "secret": {
                            "secretName": "inference-keys",
                            "defaultMode": 0o440,
                            "items": [{"key": f"{kind}-key", "path": "key"}],
                        },
                    }
                    for kind in ("api", "admin")
                ),
                {"name": "sync", "emptyDir": {}},
            ],
        ),
        namespace,
    )
    try:
        wait_pod(
            kube,
            namespace,
            "escape",
            lambda p: (
                p.get("status", {}).get("containerStatuses") is not None
                and any(c["name"] == "sandbox" and "terminated" in c["state"] for c in p["status"]["containerStatuses"])
            ),
            timeout=90,
        )
        [pod_dir] = find_pod_dirs(agent.root, namespace, "escape")
        runner_out = container_logs(pod_dir, "runner")[-1].read_text()
        # the pod's links work: the runner reaches its sandbox's declared port and the node's egress address
        assert 'runner reaches sandbox: """ | host service: host service' in runner_out, runner_out
        assert f"runner cannot reach the host daemon: {errno.ENOENT}" in runner_out, runner_out
        assert "runner reads the inference keys: [32, 32]" in runner_out, runner_out
        out = container_logs(pod_dir, "sandbox")[-1].read_text()
        # the script gets the token reversed on its command line, so finding that is not finding the token
        report = json.loads(out.strip().splitlines()[-1])
        assert set(report) >= {
            "open_by_handle_at",
            "proc_secret",
            "mount",
            "mknod",
            "syscalls",
            "capabilities",
            f"reach 127.0.0.1:{host_service}/ingest",
            f"reach unix:{host_daemon_socket}",
        }, out
        assert {k: v for k, v in report.items() if v != "blocked"} == {}, out
    finally:
        kube.delete(PODS, "escape", namespace, grace_period_seconds=1)
        wait_pod(kube, namespace, "escape", lambda p: not p, timeout=30)
