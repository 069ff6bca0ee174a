"""The real node itself: the kubelet's identity, pods from a local image with an init
container and an emptyDir, `kubectl logs` and `kubectl exec`, Services through
kube-proxy, and networking that cannot leave the machine."""

from __future__ import annotations

import json

from swerollout_dev.cluster.buildimage import BASE_IMAGE
from tests.cluster.conftest import kubelet_kubeconfig
from tests.support.realnode import RealNode


def _pod(name: str, namespace: str, command: str, *, labels: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "work", "emptyDir": {}}],
                "initContainers": [
                    {
                        "name": "init",
                        "image": BASE_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "echo from-init > /work/note"],
                        "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                    }
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": BASE_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", command],
                        "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                    }
                ],
            },
        }
    )


def _running(node: RealNode, namespace: str, name: str) -> dict | None:  # type: ignore[type-arg]
    pod = node.get("pod", name, "-n", namespace)
    return pod if pod["status"].get("phase") == "Running" else None


def test_node_is_ready_with_its_own_identity(real_node: RealNode) -> None:
    node = real_node.get("node", real_node.config.node_name)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.config.node_ip
    kubelet = kubelet_kubeconfig(real_node)
    whoami = json.loads(real_node.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubelet).stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:node:{real_node.config.node_name}"
    assert "system:nodes" in whoami["status"]["userInfo"]["groups"]
    # The Node authorizer: a kubelet reads only what its own pods need.
    secrets = real_node.kubectl("get", "secrets", "-A", kubeconfig=kubelet)
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr.lower()
    # NodeRestriction: it may not label itself into node-restricted keys or touch other nodes.
    other = real_node.kubectl(
        "label", "node", real_node.config.node_name, "node-restriction.kubernetes.io/evil=1", kubeconfig=kubelet
    )
    assert other.returncode != 0 and "forbidden" in other.stderr.lower()


def test_pod_with_init_container_emptydir_logs_and_exec(real_node: RealNode, pod_namespace: str) -> None:
    real_node.kubectl_ok(
        "apply", "-f", "-", input=_pod("hello", pod_namespace, "cat /work/note; python3 -c 'print(6 * 7)'; sleep 600")
    )
    pod = real_node.wait_for("pod hello Running", lambda: _running(real_node, pod_namespace, "hello"))
    assert pod["status"]["podIP"].startswith("10.244.0.")
    logs = real_node.wait_for(
        "the container's output in kubectl logs",
        lambda: (
            (out := real_node.kubectl("logs", "hello", "-c", "main", "-n", pod_namespace).stdout)
            and "42" in out
            and out
        ),
    )
    assert logs.split() == ["from-init", "42"]
    exec_ = real_node.kubectl(
        "exec", "hello", "-c", "main", "-n", pod_namespace, "--", "sh", "-c", "cat /work/note && id -u"
    )
    assert exec_.returncode == 0, exec_.stderr
    assert exec_.stdout.split() == ["from-init", "0"]


def test_pod_network_stays_on_this_machine(real_node: RealNode, pod_namespace: str) -> None:
    real_node.kubectl_ok("apply", "-f", "-", input=_pod("net", pod_namespace, "sleep 600"))
    real_node.wait_for("pod net Running", lambda: _running(real_node, pod_namespace, "net"))
    probe = (
        "import errno, socket\n"
        "for host in ('192.0.2.1', '1.1.1.1', '8.8.8.8'):\n"
        "    s = socket.socket(); s.settimeout(5)\n"
        "    print(host, errno.errorcode.get(s.connect_ex((host, 443)), 'connected'))\n"
        "s = socket.socket(); s.settimeout(5)\n"
        f"print('node', s.connect_ex(('{real_node.config.node_ip}', {real_node.state().server_url.rsplit(':', 1)[1]})))\n"
    )
    out = real_node.kubectl_ok("exec", "net", "-c", "main", "-n", pod_namespace, "--", "python3", "-c", probe)
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    # No route off the machine at all: the pod has routes to the service and node ranges only.
    assert lines["192.0.2.1"] == lines["1.1.1.1"] == lines["8.8.8.8"] == "ENETUNREACH"
    # The API server on the node IP is reachable from a pod.
    assert lines["node"] == "0"
    routes = real_node.kubectl_ok("exec", "net", "-c", "main", "-n", pod_namespace, "--", "cat", "/proc/net/route")
    assert not any(line.split()[1] == "00000000" for line in routes.splitlines()[1:]), "pod has a default route"


def test_service_reaches_pod_through_kube_proxy(real_node: RealNode, pod_namespace: str) -> None:
    real_node.kubectl_ok(
        "apply",
        "-f",
        "-",
        input=_pod("web", pod_namespace, "cd /work && python3 -m http.server 8000", labels={"app": "web"}),
    )
    real_node.kubectl_ok(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": pod_namespace},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8000}]},
            }
        ),
    )
    real_node.kubectl_ok("apply", "-f", "-", input=_pod("client", pod_namespace, "sleep 600"))
    for name in ("web", "client"):
        real_node.wait_for(f"pod {name} Running", lambda n=name: _running(real_node, pod_namespace, n))
    cluster_ip = real_node.get("service", "web", "-n", pod_namespace)["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.96.")
    fetch = (
        f"import urllib.request; print(urllib.request.urlopen('http://{cluster_ip}/note', timeout=5).read().decode())"
    )
    body = real_node.wait_for(
        "the Service to answer through kube-proxy",
        lambda: (
            (
                p := real_node.kubectl(
                    "exec", "client", "-c", "main", "-n", pod_namespace, "--", "python3", "-c", fetch
                )
            ).returncode
            == 0
            and p.stdout
        ),
        timeout=120,
        interval=2,
    )
    assert body.strip() == "from-init"
