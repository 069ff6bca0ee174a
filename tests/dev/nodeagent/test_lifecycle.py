"""Pods created through the real API server run to completion on the node agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from swerollout.kube import EVENTS, PODS, KubeClient
from tests.support.nodeagent_support import AgentProcess, phase_is, pod_manifest, wait_pod

RUNNER = "swerollout:dev"


def statuses(pod: dict[str, Any], key: str = "containerStatuses") -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in pod["status"].get(key, [])}


def test_pods_from_kubectl_run_to_completion_with_exit_codes(
    agent: AgentProcess, kubectl: Callable[..., Any], kube: KubeClient, namespace: str
) -> None:
    ok = pod_manifest(
        "ok",
        agent.node,
        [
            # resources make the pod Burstable: the API server's qosClass must be left alone
            {
                "name": "a",
                "image": RUNNER,
                "command": ["sh", "-c", "echo hello from a"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            },
            {"name": "b", "image": RUNNER, "command": ["python", "-c"], "args": ["import sys; sys.exit(0)"]},
        ],
        restartPolicy="Never",
    )
    bad = pod_manifest(
        "bad",
        agent.node,
        [
            {"name": "a", "image": RUNNER, "command": ["sh", "-c", "exit 0"]},
            {"name": "b", "image": RUNNER, "command": ["sh", "-c", "exit 3"]},
        ],
        restartPolicy="Never",
    )
    for manifest in (ok, bad):
        result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
        assert result.returncode == 0, result.stderr

    pod = wait_pod(kube, namespace, "ok", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["qosClass"] == "Burstable"
    assert pod["spec"]["nodeName"] == agent.node
    # each pod has its own loopback address; the node (hostIP) is 127.0.0.1
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("127.") and not pod_ip.startswith("127.0.") and pod["status"]["hostIP"] == "127.0.0.1"
    assert pod["status"]["podIPs"] == [{"ip": pod_ip}] and pod["status"]["startTime"]
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"]["status"] == "True"
    assert conditions["Initialized"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "PodCompleted"
    for s in statuses(pod).values():
        term = s["state"]["terminated"]
        assert term["exitCode"] == 0 and term["reason"] == "Completed" and term["finishedAt"]

    pod = wait_pod(kube, namespace, "bad", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Failed"
    codes = {n: s["state"]["terminated"]["exitCode"] for n, s in statuses(pod).items()}
    assert codes == {"a": 0, "b": 3}
    assert statuses(pod)["b"]["state"]["terminated"]["reason"] == "Error"

    logs = kubectl("get", "pod", "ok", "-n", namespace, "-o", "jsonpath={.status.phase}")
    assert logs.stdout == "Succeeded"


def test_init_containers_run_in_order_and_gate_the_others(
    agent: AgentProcess, kube: KubeClient, namespace: str
) -> None:
    shared = [{"name": "work", "mountPath": "/work-area"}]
    gated = pod_manifest(
        "gated",
        agent.node,
        [
            {"name": "main", "image": RUNNER, "command": ["sh", "-c", "cat /work-area/order"], "volumeMounts": shared},
        ],
        restartPolicy="Never",
        volumes=[{"name": "work", "emptyDir": {}}],
        initContainers=[
            {
                "name": "first",
                "image": RUNNER,
                "command": ["sh", "-c", "sleep 0.5; echo first >> /work-area/order"],
                "volumeMounts": shared,
            },
            {
                "name": "second",
                "image": RUNNER,
                "command": ["sh", "-c", "echo second >> /work-area/order"],
                "volumeMounts": shared,
            },
        ],
    )
    kube.create(PODS, gated, namespace)
    pod = wait_pod(
        kube,
        namespace,
        "gated",
        lambda p: (
            bool(p)
            and bool(p["status"].get("initContainerStatuses"))
            and "running" in statuses(p, "initContainerStatuses")["first"]["state"]
        ),
    )
    assert pod["status"]["phase"] == "Pending"
    assert "terminated" not in statuses(pod)["main"]["state"] and "running" not in statuses(pod)["main"]["state"]
    pod = wait_pod(kube, namespace, "gated", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    init = statuses(pod, "initContainerStatuses")
    assert init["first"]["state"]["terminated"]["finishedAt"] <= init["second"]["state"]["terminated"]["startedAt"]

    blocked = pod_manifest(
        "blocked",
        agent.node,
        [
            {"name": "main", "image": RUNNER, "command": ["sh", "-c", "echo must-not-run"]},
        ],
        restartPolicy="Never",
        initContainers=[{"name": "fails", "image": RUNNER, "command": ["sh", "-c", "exit 5"]}],
    )
    kube.create(PODS, blocked, namespace)
    pod = wait_pod(kube, namespace, "blocked", phase_is("Failed"))
    assert statuses(pod, "initContainerStatuses")["fails"]["state"]["terminated"]["exitCode"] == 5
    assert "waiting" in statuses(pod)["main"]["state"]
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["Initialized"]["status"] == "False"


def test_unknown_image_fails_the_pod_with_a_clear_reason(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    kube.create(
        PODS,
        pod_manifest(
            "nope",
            agent.node,
            [
                {"name": "main", "image": "docker.io/library/postgres:16", "command": ["postgres"]},
            ],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "nope", phase_is("Failed"))
    waiting = statuses(pod)["main"]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert "docker.io/library/postgres:16" in waiting["message"]
    assert pod["status"]["reason"] == "ErrImagePull"

    kube.create(
        PODS,
        pod_manifest(
            "relative",
            agent.node,
            [
                {"name": "main", "image": "file://repos/x", "command": ["true"]},
            ],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "relative", phase_is("Failed"))
    assert statuses(pod)["main"]["state"]["waiting"]["reason"] == "InvalidImageName"

    kube.create(
        PODS, pod_manifest("nocommand", agent.node, [{"name": "main", "image": RUNNER, "args": ["x"]}]), namespace
    )
    pod = wait_pod(kube, namespace, "nocommand", phase_is("Failed"))
    waiting = statuses(pod)["main"]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError" and "command" in waiting["message"]


def test_restart_policy_on_failure_restarts_until_success(
    agent: AgentProcess, kube: KubeClient, namespace: str
) -> None:
    script = "if [ -e /scratch/tried ]; then exit 0; fi; touch /scratch/tried; exit 4"
    kube.create(
        PODS,
        pod_manifest(
            "retry",
            agent.node,
            [
                {
                    "name": "main",
                    "image": RUNNER,
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "s", "mountPath": "/scratch"}],
                },
            ],
            restartPolicy="OnFailure",
            volumes=[{"name": "s", "emptyDir": {}}],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "retry", phase_is("Succeeded", "Failed"))
    main = statuses(pod)["main"]
    assert pod["status"]["phase"] == "Succeeded"
    assert main["restartCount"] == 1
    assert main["lastState"]["terminated"]["exitCode"] == 4


def test_active_deadline_fails_a_running_pod(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    kube.create(
        PODS,
        pod_manifest(
            "slow",
            agent.node,
            [
                {"name": "main", "image": RUNNER, "command": ["sleep", "60"]},
            ],
            # Counted from the pod's start on the node, before its container is launched: at a
            # load of 30 a 1 s deadline fired while `sleep` was still being set up, and the
            # SIGKILL after the grace period ended it (137) instead of the SIGTERM (143).
            activeDeadlineSeconds=6,
            terminationGracePeriodSeconds=1,
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "slow", phase_is("Failed"))
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert statuses(pod)["main"]["state"]["terminated"]["exitCode"] == 143
    events = kube.list(EVENTS, namespace, field_selector="involvedObject.name=slow")["items"]
    assert {"Started", "DeadlineExceeded"} <= {e["reason"] for e in events}


def test_readiness_probes_exec_http_and_tcp(agent: AgentProcess, kube: KubeClient, namespace: str) -> None:
    from swerollout_dev.controlplane import free_port

    port = free_port()
    # binds the pod's own address: probes target the podIP, as a kubelet's do
    server = (
        "import http.server as h, os; h.HTTPServer((os.environ['SWEROLLOUT_POD_LOOPBACK'], "
        f"{port}), h.SimpleHTTPRequestHandler).serve_forever()"
    )
    fast = {"periodSeconds": 1, "failureThreshold": 1}
    kube.create(
        PODS,
        pod_manifest(
            "probed",
            agent.node,
            [
                {
                    "name": "web",
                    "image": RUNNER,
                    "command": ["python", "-c", server],
                    "ports": [{"name": "http", "containerPort": port}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, **fast},
                },
                {
                    "name": "tcp",
                    "image": RUNNER,
                    "command": ["sleep", "60"],
                    "readinessProbe": {"tcpSocket": {"port": port}, **fast},
                },
                {
                    "name": "file",
                    "image": RUNNER,
                    "command": ["sh", "-c", "sleep 1.5; touch /tmp/ready; sleep 60"],
                    "readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/ready"]}, **fast},
                },
            ],
        ),
        namespace,
    )
    pod = wait_pod(kube, namespace, "probed", lambda p: bool(p) and p["status"].get("phase") == "Running")
    pod = wait_pod(
        kube,
        namespace,
        "probed",
        lambda p: any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])),
    )
    assert all(s["ready"] for s in statuses(pod).values())
    kube.delete(PODS, "probed", namespace, grace_period_seconds=1)
    wait_pod(kube, namespace, "probed", lambda p: not p, timeout=20)
