"""Env, volumes, deletion, isolation, task-image checkouts and agent restarts, against the real API server."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from swerollout.kube import CONFIGMAPS, PODS, SECRETS, KubeClient, NotFound
from swerollout_dev.controlplane import free_port
from swerollout_dev.nodeagent.layout import PodDir, container_logs, find_pod_dirs
from tests.support.nodeagent_support import AgentProcess, phase_is, pid_alive, pod_manifest, wait_pod

RUNNER = "swerollout:dev"


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


def log_of(agent: AgentProcess, namespace: str, pod: str, name: str) -> str:
    [pod_dir] = find_pod_dirs(agent.root, namespace, pod)
    return container_logs(pod_dir, name)[-1].read_text()


def secret(kube: KubeClient, namespace: str, name: str, data: dict[str, bytes]) -> None:
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        },
        namespace,
    )


def test_env_value_from_and_secret_configmap_volumes(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    secret(kube, namespace, "creds", {"token": b"t0ken", "other": b"x"})
    kube.create(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"mode": "train", "extra": "e"}},
        namespace,
    )
    script = (
        'echo "tok=$TOKEN mode=$MODE name=$POD ns=$NS ip=$IP greet=$GREETING"; '
        "ls /etc/creds; cat /etc/creds/renamed/tok; echo; stat -c %a /etc/creds/renamed/tok; "
        "cat /etc/cfg/mode; echo; stat -c %a /etc/cfg/mode; pwd"
    )
    kube.create(
        PODS,
        pod_manifest(
            "envpod",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "command": ["sh", "-c", script],
                    "workingDir": "/etc/cfg",
                    "env": [
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "GREETING", "value": "hi-$(POD)"},
                    ],
                    "volumeMounts": [
                        {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                    ],
                }
            ],
            restartPolicy="Never",
            volumes=[
                {
                    "name": "creds",
                    "secret": {
                        "secretName": "creds",
                        "items": [{"key": "token", "path": "renamed/tok", "mode": 0o400}],
                    },
                },
                {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o640}},
            ],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "envpod", phase_is("Succeeded", "Failed"))
    out = log_of(agent, namespace, "envpod", "main")
    ip = pod["status"]["podIP"]
    assert pod["status"]["phase"] == "Succeeded", out
    lines = out.splitlines()
    assert lines[0] == f"tok=t0ken mode=train name=envpod ns={namespace} ip={ip} greet=hi-envpod"
    assert lines[1:] == ["renamed", "t0ken", "400", "train", "640", "/etc/cfg"]


def test_missing_secret_waits_then_starts_when_created(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    kube.create(
        PODS,
        pod_manifest(
            "waits",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "command": ["sh", "-c", "echo $V"],
                    "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "later", "key": "v"}}}],
                }
            ],
            restartPolicy="Never",
        ),
        namespace,
    )
    pod = wait_pod(
        kube,
        namespace,
        "waits",
        lambda p: (
            bool(p)
            and bool(p["status"].get("containerStatuses"))
            and container(p, "main")["state"].get("waiting", {}).get("reason") == "CreateContainerConfigError"
        ),
    )
    assert "later" in container(pod, "main")["state"]["waiting"]["message"]
    assert pod["status"]["phase"] == "Pending"
    secret(kube, namespace, "later", {"v": b"arrived"})
    wait_pod(kube, namespace, "waits", phase_is("Succeeded"))
    assert log_of(agent, namespace, "waits", "main") == "arrived\n"


def test_deleting_a_pod_stops_its_processes_within_the_grace_period(
    agent: AgentProcess, kube: KubeClient, namespace: str
) -> None:
    graceful = "trap 'echo got-term; exit 0' TERM; while true; do sleep 0.1; done"
    kube.create(
        PODS,
        pod_manifest(
            "del",
            agent.node,
            [
                {"name": "polite", "image": RUNNER, "command": ["sh", "-c", graceful]},
                {
                    "name": "stubborn",
                    "image": RUNNER,
                    "command": ["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"],
                },
            ],
            # wide enough that the polite container's exit is published while the stubborn one
            # still runs: the agent writes a pod's latest status, so a shorter window can be skipped
            terminationGracePeriodSeconds=6,
        ),
        namespace,
    )
    pod = wait_pod(
        kube,
        namespace,
        "del",
        lambda p: (
            bool(p)
            and p["status"].get("phase") == "Running"
            and all("running" in s["state"] for s in p["status"]["containerStatuses"])
        ),
    )
    pids = [int(container(pod, n)["containerID"].rpartition("/")[2]) for n in ("polite", "stubborn")]
    assert all(pid_alive(p) for p in pids)
    [pod_dir] = find_pod_dirs(agent.root, namespace, "del")
    began = time.monotonic()
    kube.delete(PODS, "del", namespace)
    # Every version the agent wrote, in order, from the version the test last read: a watch
    # misses none, where polling a loaded API server can step over the grace period's window.
    versions: list[dict[str, Any]] = []
    deleted = False
    for event in kube.watch(
        PODS,
        namespace,
        resource_version=pod["metadata"]["resourceVersion"],
        field_selector="metadata.name=del",
        timeout_seconds=60,
    ):
        if event.type == "BOOKMARK":
            continue
        versions.append(event.object)
        if event.type == "DELETED":
            deleted = True
            break
    gone_after = time.monotonic() - began
    assert deleted, f"the pod was not deleted within the watch's 60 s: {[v.get('status') for v in versions]}"
    # SIGTERM first: the polite container exits 0 while the stubborn one is still in its grace period
    states = [
        (
            container(v, "polite")["state"].get("terminated", {}).get("exitCode"),
            "running" in container(v, "stubborn")["state"],
        )
        for v in versions
        if v.get("status", {}).get("containerStatuses")
    ]
    assert (0, True) in states, f"no version had the polite container ended and the stubborn one running: {states}"
    assert not any(pid_alive(p) for p in pids)
    # the object disappears only after the stubborn container was killed at the end of its grace period
    assert gone_after >= 5.5
    assert not pod_dir.exists()


def test_sandbox_in_bubblewrap_cannot_read_the_runner_secret(
    agent: AgentProcess, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    secret(kube, namespace, "ingest", {"token": b"runner-only"})
    pod = pod_manifest(
        "iso",
        agent.node,
        [
            {
                "name": "runner",
                "image": RUNNER,
                "command": ["sh", "-c", "cat /etc/swerollout/ingest/token"],
                "volumeMounts": [{"name": "ingest", "mountPath": "/etc/swerollout/ingest", "readOnly": True}],
            },
            {
                "name": "sandbox",
                "image": f"file://{repo.path}",
                "workingDir": "/testbed",
                "command": [
                    "sh",
                    "-c",
                    "ls /etc/swerollout/ingest/token; ls $PODS_DIR; cat $OUTSIDE; cat README; echo end",
                ],
            },
        ],
        restartPolicy="Never",
        volumes=[{"name": "ingest", "secret": {"secretName": "ingest"}}],
    )
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    pod["spec"]["containers"][1]["env"] = [
        {"name": "PODS_DIR", "value": str(agent.root / "pods")},
        {"name": "OUTSIDE", "value": str(outside)},
    ]
    kube.create(PODS, pod, namespace)
    done = wait_pod(kube, namespace, "iso", phase_is("Succeeded", "Failed"))
    assert log_of(agent, namespace, "iso", "runner") == "runner-only"
    out = log_of(agent, namespace, "iso", "sandbox")
    assert "runner-only" not in out and "host file" not in out
    assert out.count("No such file or directory") == 3, out
    assert "hello v2" in out and out.endswith("end\n")
    conditions = {c["type"]: c for c in done["status"]["conditions"]}
    assert conditions["swerollout.io/Isolated"]["status"] == "True"
    # The token really is on this machine, in the runner's volume: only the sandbox's view lacks it.
    [pod_dir] = find_pod_dirs(agent.root, namespace, "iso")
    assert (pod_dir / "volumes" / "ingest" / "token").read_bytes() == b"runner-only"


class Repo:
    def __init__(self, path: Path, commits: list[str]) -> None:
        self.path, self.commits = path, commits


def make_repo(path: Path) -> Repo:
    path.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args],
            check=True,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@x",
                "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@x",
            },
        ).stdout.strip()

    git("init", "-q")
    commits = []
    for version in ("v1", "v2"):
        (path / "README").write_text(f"hello {version}\n")
        git("add", "README")
        git("commit", "-q", "-m", version)
        commits.append(git("rev-parse", "HEAD"))
    return Repo(path, commits)


def test_file_image_checks_out_the_base_commit_and_swerex_answers(
    agent: AgentProcess, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    port = free_port()
    kube.create(
        PODS,
        pod_manifest(
            "swe",
            agent.node,
            [
                {
                    "name": "sandbox",
                    "image": f"file://{repo.path}",
                    "workingDir": "/testbed",
                    "command": ["swerex-remote", "--host", "$(POD_IP)", "--port", str(port), "--auth-token", "tok"],
                    "env": [
                        {"name": "SWEROLLOUT_BASE_COMMIT", "value": repo.commits[0]},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    ],
                    "ports": [{"containerPort": port}],  # reachable from the host at the pod IP
                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
                }
            ],
        ),
        namespace,
    )
    ready = wait_pod(
        kube,
        namespace,
        "swe",
        lambda p: (
            bool(p) and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ),
        timeout=60,
    )
    headers = {"X-API-Key": "tok"}
    pod_ip = ready["status"]["podIP"]
    with httpx.Client(base_url=f"http://{pod_ip}:{port}", headers=headers, timeout=30) as http:
        assert http.get("/is_alive").json()["is_alive"] is True
        result = http.post("/execute", json={"command": "git rev-parse HEAD; cat README; pwd", "shell": True}).json()
    assert result["stdout"].split() == [repo.commits[0], "hello", "v1", "/testbed"]
    # the checkout is private: the original repository is untouched
    assert (repo.path / "README").read_text() == "hello v2\n"
    kube.delete(PODS, "swe", namespace, grace_period_seconds=2)
    wait_pod(kube, namespace, "swe", lambda p: not p, timeout=20)
    with httpx.Client(timeout=2) as http:
        try:
            http.get(f"http://{pod_ip}:{port}/is_alive")
            raise AssertionError("swerex-remote still answers after the pod was deleted")
        except httpx.TransportError:
            pass


def test_agent_restart_adopts_running_pods_and_records_lost_ones(
    agent_factory: Callable[..., AgentProcess], kube: KubeClient, namespace: str
) -> None:
    agent = agent_factory()
    for name in ("keeps", "dies"):
        kube.create(
            PODS,
            pod_manifest(
                name,
                agent.node,
                [
                    {"name": "main", "image": RUNNER, "command": ["sleep", "300"]},
                ],
                restartPolicy="Never",
            ),
            namespace,
        )
    pids = {}
    for name in ("keeps", "dies"):
        pod = wait_pod(kube, namespace, name, lambda p: bool(p) and p["status"].get("phase") == "Running")
        pids[name] = int(container(pod, "main")["containerID"].rpartition("/")[2])
    agent.stop(signal.SIGKILL)
    assert pid_alive(pids["keeps"]) and pid_alive(pids["dies"])
    # while the agent is down, one container's processes are killed
    [dies_dir] = find_pod_dirs(agent.root, namespace, "dies")
    for child in subprocess.run(["pgrep", "-P", str(pids["dies"])], capture_output=True, text=True).stdout.split():
        os.kill(int(child), signal.SIGKILL)
    stray = agent.root / "pods" / f"{namespace}_gone_00000000-dead"
    stray.mkdir(parents=True)
    agent_factory()
    dead = wait_pod(kube, namespace, "dies", phase_is("Failed"))
    assert container(dead, "main")["state"]["terminated"]["exitCode"] != 0
    kept = kube.get(PODS, "keeps", namespace)
    assert kept["status"]["phase"] == "Running"
    assert container(kept, "main")["containerID"] == f"local://{pids['keeps']}"
    assert pid_alive(pids["keeps"])
    assert not stray.exists() and dies_dir.exists()
    kube.delete(PODS, "keeps", namespace, grace_period_seconds=1)
    wait_pod(kube, namespace, "keeps", lambda p: not p, timeout=20)
    assert not pid_alive(pids["keeps"])
    try:
        kube.get(PODS, "keeps", namespace)
        raise AssertionError("pod object should be gone")
    except NotFound:
        pass


def _main_ready(pod: dict[str, Any] | None) -> bool:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any(s["name"] == "main" and s.get("ready") is True for s in statuses)


def test_a_running_container_still_reads_its_secret_after_the_agent_restarts(
    agent_factory: Callable[..., AgentProcess], kube: KubeClient, namespace: str
) -> None:
    """The agent that adopts a running pod refreshes its volumes; the container's mount of
    the Secret must show the same files after that, as a runner reads its keys on demand
    (a rollout's run set up just after a node agent restart once failed: key not found).
    Its exec probe still runs in the container's view (it ran on the host, failing for good)."""
    agent = agent_factory()
    secret(kube, namespace, "keys", {"key": b"k3y"})
    reader = 'while :; do if [ "$(cat /etc/keys/key)" = k3y ]; then echo ok; else echo missing; fi; sleep 0.2; done'
    kube.create(
        PODS,
        pod_manifest(
            "reader",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "command": ["sh", "-c", reader],
                    "volumeMounts": [{"name": "keys", "mountPath": "/etc/keys", "readOnly": True}],
                    # Only inside the container's view is there an /etc/keys.
                    "readinessProbe": {"exec": {"command": ["cat", "/etc/keys/key"]}, "periodSeconds": 1},
                }
            ],
            restartPolicy="Never",
            volumes=[{"name": "keys", "secret": {"secretName": "keys"}}],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "reader", _main_ready)
    pid = int(container(pod, "main")["containerID"].rpartition("/")[2])
    agent.stop(signal.SIGKILL)
    [pod_dir] = find_pod_dirs(agent.root, namespace, "reader")
    state = PodDir(pod_dir).state_file
    written = state.stat().st_mtime_ns
    before = len(log_of(agent, namespace, "reader", "main").splitlines())
    agent_factory()
    # The new agent records the adopted pod's state, then refreshes its volumes.
    deadline = time.monotonic() + 120
    while state.stat().st_mtime_ns == written and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state.stat().st_mtime_ns != written, "the new agent did not take the pod over"
    time.sleep(3)
    after = log_of(agent, namespace, "reader", "main").splitlines()[before:]
    assert pid_alive(pid) and after and set(after) == {"ok"}, after
    ready = wait_pod(kube, namespace, "reader", _main_ready)
    assert container(ready, "main")["containerID"] == f"local://{pid}"


def test_logs_command_shows_and_follows_container_output(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    import sys

    kube.create(
        PODS,
        pod_manifest(
            "talker",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "command": ["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"],
                },
                {"name": "other", "image": RUNNER, "command": ["sleep", "0.1"]},
            ],
            restartPolicy="Never",
        ),
        namespace,
    )
    wait_pod(kube, namespace, "talker", lambda p: bool(p) and p["status"].get("phase") == "Running")
    base = [
        sys.executable,
        "-m",
        "swerollout.cli.main",
        "logs",
        "talker",
        "-n",
        namespace,
        "--node-root",
        str(agent.root),
    ]
    followed = subprocess.run([*base, "-c", "main", "-f"], capture_output=True, text=True, timeout=30)
    assert followed.returncode == 0 and followed.stdout == "line 1\nline 2\nline 3\n"
    ambiguous = subprocess.run(base, capture_output=True, text=True, timeout=30)
    assert ambiguous.returncode == 1 and "main, other" in ambiguous.stderr
    wait_pod(kube, namespace, "talker", phase_is("Succeeded"))
    again = subprocess.run([*base, "-c", "main"], capture_output=True, text=True, timeout=30)
    assert again.stdout == "line 1\nline 2\nline 3\n"


HOLD = "example.com/hold"


def test_a_gated_pod_is_not_bound_and_a_deleted_pod_ends_terminal_before_its_finalizer_goes(
    agent: AgentProcess, kube: KubeClient, namespace: str
) -> None:
    """What Kueue's plain-Pod integration needs of a kubelet and scheduler: a pod with a
    scheduling gate is not bound until the gate is removed, and a deleted pod held by a
    finalizer reads a terminal phase (here: one whose container never started, waiting for
    a Secret), so the controller holding it knows it ended and lets it go."""
    gated = pod_manifest(
        "gated",
        agent.node,
        [{"name": "main", "image": RUNNER, "command": ["sh", "-c", "exit 0"]}],
        restartPolicy="Never",
        schedulingGates=[{"name": HOLD}],
    )
    kube.create(PODS, gated, namespace)
    # Created after the gated one: once it has run, the agent has seen the gated pod too.
    kube.create(
        PODS,
        pod_manifest(
            "plain", agent.node, [{"name": "main", "image": RUNNER, "command": ["true"]}], restartPolicy="Never"
        ),
        namespace,
    )
    wait_pod(kube, namespace, "plain", phase_is("Succeeded"))
    assert not kube.get(PODS, "gated", namespace)["spec"].get("nodeName"), "a gated pod is not bound"
    assert f"binding {namespace}/gated" not in agent.log_path.read_text(), "no binding was attempted"
    kube.patch(PODS, "gated", {"spec": {"schedulingGates": None}}, namespace)
    wait_pod(kube, namespace, "gated", phase_is("Succeeded"))

    held = pod_manifest(
        "held",
        agent.node,
        [
            {
                "name": "main",
                "image": RUNNER,
                "command": ["sh", "-c", "echo $V"],
                "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "never", "key": "v"}}}],
            }
        ],
        restartPolicy="Never",
    )
    held["metadata"]["finalizers"] = [HOLD]
    kube.create(PODS, held, namespace)
    wait_pod(
        kube,
        namespace,
        "held",
        lambda p: bool(p.get("status", {}).get("containerStatuses")) and "waiting" in container(p, "main")["state"],
    )
    kube.delete(PODS, "held", namespace)
    ended = wait_pod(
        kube,
        namespace,
        "held",
        lambda p: bool(p) and p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Failed",
    )
    assert ended["status"]["reason"] == "Terminated", ended["status"]
    kube.patch(PODS, "held", {"metadata": {"finalizers": None}}, namespace)
    wait_pod(kube, namespace, "held", lambda p: not p)
