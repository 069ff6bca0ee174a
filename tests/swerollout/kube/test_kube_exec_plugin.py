"""Kubeconfigs as managed clusters hand them out, against the real API server: an exec
credential plugin that fetches a TokenRequest token for a ServiceAccount, the kubeconfig
split over two files merged through $KUBECONFIG, and tls-server-name."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from swerollout.client import AsyncRolloutClient
from swerollout.kube import CONFIGMAPS, SECRETS, Forbidden, KubeClient, TransportError, load_config
from swerollout_dev.controlplane import ControlPlane

PLUGIN = """#!{python}
# An exec credential plugin, as EKS/GKE/AKS ship them: prints an ExecCredential with a
# short-lived token (a TokenRequest for the ServiceAccount, made with the admin identity).
import json, subprocess, sys
with open({calls!r}, "a") as calls:
    calls.write("call\\n")
token = subprocess.run(
    [{kubectl!r}, "--kubeconfig", {admin!r}, "create", "token", "trainer", "-n", {namespace!r}, "--duration", "10m"],
    check=True, capture_output=True, text=True,
).stdout.strip()
json.dump({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
           "status": {{"token": token}}}}, sys.stdout)
"""


def _whoami(kube: KubeClient) -> str:
    review = kube.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


@pytest.fixture
def plugin_kubeconfig(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(clusters+users file, contexts file, calls log) for ServiceAccount `trainer` of ``namespace``."""
    run = control_plane.kubectl
    for args in (
        ("create", "serviceaccount", "trainer", "-n", namespace),
        ("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", namespace),
        (
            "create",
            "rolebinding",
            "trainer-cm",
            "--role=cm-reader",
            f"--serviceaccount={namespace}:trainer",
            "-n",
            namespace,
        ),
    ):
        done = run(*args)
        assert done.returncode == 0, done.stderr
    admin = yaml.safe_load(control_plane.kubeconfig_path.read_text())
    calls = tmp_path / "calls.log"
    plugin = tmp_path / "token-plugin"
    kubectl = str(control_plane.binaries.kubectl)
    plugin.write_text(
        PLUGIN.format(
            python=sys.executable,
            calls=str(calls),
            kubectl=kubectl,
            admin=str(control_plane.kubeconfig_path),
            namespace=namespace,
        )
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    cluster = dict(admin["clusters"][0]["cluster"])
    cluster["tls-server-name"] = "kubernetes.default.svc"
    first: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "managed", "cluster": cluster}],
        "users": [
            {
                "name": "sa",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": str(plugin),
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
    }
    second = {
        "apiVersion": "v1",
        "kind": "Config",
        "contexts": [{"name": "managed", "context": {"cluster": "managed", "user": "sa", "namespace": namespace}}],
        "current-context": "managed",
    }
    a, b = tmp_path / "clusters.yaml", tmp_path / "contexts.yaml"
    a.write_text(yaml.safe_dump(first))
    b.write_text(yaml.safe_dump(second))
    return a, b, calls


def test_exec_plugin_token_request_identity(plugin_kubeconfig: tuple[Path, Path, Path], namespace: str) -> None:
    a, b, calls = plugin_kubeconfig
    config = load_config(environ={"KUBECONFIG": f"{b}:{a}", "HOME": str(a.parent)})
    assert config.namespace == namespace and config.tls_server_name == "kubernetes.default.svc"
    with KubeClient(config) as kube:
        assert _whoami(kube) == f"system:serviceaccount:{namespace}:trainer"
        assert kube.list(CONFIGMAPS, namespace)["kind"] == "ConfigMapList"
        with pytest.raises(Forbidden):
            kube.list(SECRETS, namespace)
    # The token is cached by the loader until it expires: one plugin run for all those calls.
    assert calls.read_text().count("call") == 1


def test_tls_server_name_is_the_name_verified(plugin_kubeconfig: tuple[Path, Path, Path]) -> None:
    a, b, _ = plugin_kubeconfig
    doc = yaml.safe_load(a.read_text())
    doc["clusters"][0]["cluster"]["tls-server-name"] = "not-in-the-certificate.example"
    a.write_text(yaml.safe_dump(doc))
    with KubeClient(load_config(environ={"KUBECONFIG": f"{b}:{a}"})) as kube:
        with pytest.raises(TransportError, match="(?i)certificate|hostname"):
            kube.request("GET", "/version")


async def test_client_connects_with_the_plugin_kubeconfig(
    plugin_kubeconfig: tuple[Path, Path, Path], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = plugin_kubeconfig
    monkeypatch.setenv("KUBECONFIG", f"{b}:{a}")
    async with AsyncRolloutClient.connect() as client:
        assert client.namespace == namespace
        listed = await client.kube.list(CONFIGMAPS, namespace)
        assert listed["kind"] == "ConfigMapList"


def test_proxy_url_reaches_the_http_client(tmp_path: Path) -> None:
    doc = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://10.0.0.1:6443", "proxy-url": "http://127.0.0.1:3128"}}
        ],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "token").write_text("from-a-file\n")
    (tmp_path / "config").write_text(yaml.safe_dump(doc))
    config = load_config(tmp_path / "config")
    assert config.proxy_url == "http://127.0.0.1:3128"
    assert config.http_options()["proxy"] == "http://127.0.0.1:3128"
    assert config.bearer_token() == "from-a-file"
    assert json.dumps(config.request_extensions()) == "{}"
