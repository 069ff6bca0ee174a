"""`swerollout dev up / status / down` and `swerollout logs`, end to end on this machine."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from swerollout.kube import NODES, PODS, SECRETS, KubeClient, NotFound
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    cli("dev", "down", "--workdir", str(tmp_path))


def wait_phase(kube: KubeClient, name: str, phases: tuple[str, ...], timeout: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pod = kube.get(PODS, name, "default")
            if pod.get("status", {}).get("phase") in phases:
                return pod
        except NotFound:
            pass
        time.sleep(0.2)
    raise AssertionError(f"pod {name} never reached {phases}")


def test_dev_up_status_logs_down(workdir: Path) -> None:
    up = cli("dev", "up", "--workdir", str(workdir), "--policy", "oracle")
    assert up.returncode == 0, up.stdout + up.stderr
    paths = DevPaths.under(workdir)
    assert f"kubeconfig: {paths.kubeconfig}" in up.stdout
    assert paths.kubeconfig.is_file()

    again = cli("dev", "up", "--workdir", str(workdir))
    assert again.returncode != 0 and "already running" in again.stderr

    status = cli("dev", "status", "--workdir", str(workdir))
    assert status.returncode == 0, status.stdout
    state = DevState.read(paths.state)
    assert state is not None and state.status == "ready"
    for name in ("etcd", "kube-apiserver", "node-agent", "operator", "policy-server"):
        assert state.components[name].alive(), name
        assert name in status.stdout
    assert state.components["chart"].status == "running"
    assert state.components["tasks"].status == "ready"
    assert state.sglang_url.startswith("http://127.0.0.1:")
    assert httpx.get(f"{state.sglang_url}/health", timeout=10).status_code == 200
    assert f"sglang: {state.sglang_url}" in status.stdout
    # The policy server runs with an admin key (SGLang's --admin-api-key), kept in a Secret for the runners.
    assert state.admin_key_secret_ref() == {"name": "swerollout-inference-keys", "key": "admin-key"}
    admin_key = paths.inference_admin_key.read_text().strip()
    abort = {"rid": "", "abort_all": True}
    assert httpx.post(f"{state.sglang_url}/abort_request", json=abort, timeout=10).status_code == 401
    assert (
        httpx.post(
            f"{state.sglang_url}/abort_request",
            json=abort,
            timeout=10,
            headers={"Authorization": f"Bearer {admin_key}"},
        ).status_code
        == 200
    )

    with KubeClient.from_kubeconfig(paths.kubeconfig) as kube:
        stored = kube.get(SECRETS, "swerollout-inference-keys", "default")["data"]["admin-key"]
        assert base64.b64decode(stored).decode() == admin_key
        node = kube.get(NODES, "local")
        assert node["metadata"]["labels"]["swerollout.io/node-agent"] == "local"
        assert node["spec"]["taints"] == [{"key": "swerollout.io/local", "value": "true", "effect": "NoSchedule"}]
        toleration = [{"key": "swerollout.io/local", "operator": "Exists", "effect": "NoSchedule"}]
        # a pod gets no Kubernetes credentials: the dev directory is hidden from containers
        hello = f"echo hello dev; echo on stderr >&2; test -e {paths.kubeconfig} && echo leaked; true"
        for name, script in (("hello", hello), ("forever", "sleep 300")):
            kube.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name},
                    "spec": {
                        "restartPolicy": "Never",
                        "tolerations": toleration,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": "swerollout:dev", "command": ["sh", "-c", script]}],
                    },
                },
                "default",
            )
        wait_phase(kube, "hello", ("Succeeded",))
        running = wait_phase(kube, "forever", ("Running",))
        pid = int(running["status"]["containerStatuses"][0]["containerID"].rpartition("/")[2])

    logs = cli("logs", "hello", "--workdir", str(workdir))
    assert logs.returncode == 0 and logs.stdout == "hello dev\non stderr\n"
    missing = cli("logs", "nosuchpod", "--workdir", str(workdir))
    assert missing.returncode == 1 and "nosuchpod" in missing.stderr

    # the supervisor restarts a node agent that dies; the new one adopts the running pod
    os.kill(state.components["node-agent"].pid or 0, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = DevState.read(paths.state)
        if now is not None and now.components["node-agent"].restarts == 1 and now.components["node-agent"].alive():
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the node agent was not restarted")
    with KubeClient.from_kubeconfig(paths.kubeconfig) as kube:
        again = wait_phase(kube, "forever", ("Running",))
        assert again["status"]["containerStatuses"][0]["containerID"] == f"local://{pid}"
        kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "after"},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": toleration,
                    "containers": [{"name": "main", "image": "swerollout:dev", "command": ["true"]}],
                },
            },
            "default",
        )
        wait_phase(kube, "after", ("Succeeded",))
    state = DevState.read(paths.state) or state

    operator_kubeconfig = paths.operator_kubeconfig.read_text()
    assert "token" in operator_kubeconfig and "client-key" not in operator_kubeconfig

    down = cli("dev", "down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    pids = [c.pid for c in [state.supervisor, *state.components.values()] if c.pid] + [pid]
    for p in pids:
        assert not Path(f"/proc/{p}").exists() or "Z" in Path(f"/proc/{p}/stat").read_text().rpartition(")")[2][:3], p
    assert not any(str(workdir) in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
    assert cli("dev", "status", "--workdir", str(workdir)).returncode == 3
    assert not paths.state.exists()


def test_dev_up_that_fails_says_why_and_leaves_nothing_running(workdir: Path) -> None:
    up = cli(
        "dev",
        "up",
        "--workdir",
        str(workdir),
        "--policy",
        "oracle",
        "--tasks",
        str(workdir / "missing.jsonl"),
        "--no-operator",
    )
    assert up.returncode == 1
    assert "policy server did not listen" in up.stdout and "dev up failed" in up.stderr
    state = DevState.read(DevPaths.under(workdir).state)
    assert state is not None and state.status == "failed"
    deadline = time.monotonic() + 30
    while state.supervisor.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not state.supervisor.alive()
    assert not any(c.alive() for c in state.components.values())
    assert cli("dev", "status", "--workdir", str(workdir)).returncode == 3
