"""The control plane: it runs, RBAC and ServiceAccount tokens work, and it never
leaves processes behind (stop, SIGTERM, and a SIGKILLed owner reaped later)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from swerollout.kube import CONFIGMAPS, NAMESPACES, PODS, ROLEBINDINGS, ROLES, Forbidden, KubeClient, load_kubeconfig
from swerollout_dev.controlplane import ControlPlane, ControlPlaneConfig, StartupFailed, WorkdirBusy
from swerollout_dev.controlplane.cleanup import purge_namespace
from swerollout_dev.controlplane.processes import PIDFILE_NAME, cmdline_mentions, is_alive


def test_control_plane_serves_the_pinned_version_and_default_namespace(control_plane: ControlPlane) -> None:
    assert control_plane.running
    assert control_plane.server_url.startswith("https://127.0.0.1:")
    with control_plane.admin_client() as kube:
        assert kube.request("GET", "/version")["gitVersion"] == control_plane.binaries.versions.kubernetes
        assert kube.get(NAMESPACES, "default")["status"]["phase"] == "Active"
    proc = control_plane.kubectl("get", "namespace", "default", "-o", "jsonpath={.metadata.name}")
    assert (proc.returncode, proc.stdout) == (0, "default"), proc.stderr


def test_a_killed_api_server_restarts_on_the_same_port_certificates_and_data(control_plane: ControlPlane) -> None:
    """What the dev supervisor does when kube-apiserver dies: the same command line again,
    so every kubeconfig still works and etcd's objects are all there."""
    url, etcd = control_plane.server_url, control_plane.pids()["etcd"]
    with control_plane.admin_client() as kube:
        kube.create(
            CONFIGMAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "survives-restart"}, "data": {"k": "v"}},
            "default",
        )
    old = control_plane.pids()["kube-apiserver"]
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while control_plane.exited() != ["kube-apiserver"]:
        assert time.monotonic() < deadline, control_plane.exited()
        time.sleep(0.1)
    assert not control_plane.running
    new = control_plane.restart("kube-apiserver")
    assert new != old and control_plane.pids() == {"etcd": etcd, "kube-apiserver": new}
    assert control_plane.running and control_plane.server_url == url and control_plane.exited() == []
    with KubeClient(load_kubeconfig(control_plane.kubeconfig_path)) as kube:
        assert kube.get(CONFIGMAPS, "survives-restart", "default")["data"] == {"k": "v"}
        kube.delete(CONFIGMAPS, "survives-restart", "default")
    recorded = json.loads((control_plane.workdir / PIDFILE_NAME).read_text())
    assert {p["name"]: p["pid"] for p in recorded["processes"]} == control_plane.pids()


def test_admin_kubeconfig_is_private(control_plane: ControlPlane) -> None:
    assert control_plane.kubeconfig_path.stat().st_mode & 0o077 == 0


def test_a_second_manager_in_the_same_process_and_workdir_is_refused(control_plane: ControlPlane) -> None:
    with pytest.raises(WorkdirBusy):
        ControlPlane(control_plane.workdir).start()
    assert control_plane.running
    with control_plane.admin_client() as kube:
        assert kube.get(NAMESPACES, "default")


def test_kubectl_apply_from_stdin_and_helm_install(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    manifest = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-stdin\n  namespace: {namespace}\n"
    applied = control_plane.kubectl("apply", "-f", "-", input=manifest)
    assert applied.returncode == 0, applied.stderr
    assert kube.get(CONFIGMAPS, "from-stdin", namespace)["metadata"]["name"] == "from-stdin"
    # Discovery is cached per control plane, never in a ~/.kube/cache shared across recycled ports.
    assert any((control_plane.workdir / "kube-cache").rglob("*.json"))

    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\nkubeVersion: '>=1.30.0-0'\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-helm\ndata:\n  k: {{ .Values.k | quote }}\n"
    )
    installed = control_plane.helm("install", "tiny", str(chart), "-n", namespace, "--set", "k=v")
    assert installed.returncode == 0, installed.stderr
    assert kube.get(CONFIGMAPS, "from-helm", namespace)["data"] == {"k": "v"}
    listed = control_plane.helm("list", "-n", namespace, "-o", "json")
    assert [r["name"] for r in json.loads(listed.stdout)] == ["tiny"]


def test_purge_namespace_removes_bound_pods_and_finalized_objects(control_plane: ControlPlane) -> None:
    with control_plane.admin_client() as kube:
        ns = "purge-me"
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bound"},
            "spec": {"nodeName": "gone-node", "containers": [{"name": "c", "image": "x"}]},
        }
        kube.create(PODS, pod, ns)
        kube.create(
            CONFIGMAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["x.io/hold"]}},
            ns,
        )
        purge_namespace(kube, ns)
        assert kube.list(PODS, ns)["items"] == []
        assert kube.list(CONFIGMAPS, ns)["items"] == []
        # Without a namespace controller the namespace itself stays Terminating.
        assert kube.get(NAMESPACES, ns)["status"]["phase"] == "Terminating"


def _pod_reader_role(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader-can-read", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    return role, binding


def test_rbac_denies_a_serviceaccount_until_a_rolebinding_allows_it(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path, rbac_eventually: Any
) -> None:
    token = control_plane.mint_token(namespace, "reader")
    config = control_plane.write_kubeconfig_for_token(tmp_path / "reader.kubeconfig", token, namespace)

    denied = control_plane.kubectl("get", "pods", "-n", namespace, kubeconfig=config)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    with KubeClient(load_kubeconfig(config)) as as_reader:
        with pytest.raises(Forbidden) as caught:
            as_reader.list(PODS, namespace)
        assert caught.value.status == 403
        review = kube.subject_access_review(
            f"system:serviceaccount:{namespace}:reader", "list", "pods", namespace=namespace
        )
        assert review.get("allowed") is not True

        role, binding = _pod_reader_role(namespace)
        kube.create(ROLES, role)
        kube.create(ROLEBINDINGS, binding)

        assert rbac_eventually(lambda: as_reader.list(PODS, namespace))["items"] == []
        review = kube.subject_access_review(
            f"system:serviceaccount:{namespace}:reader", "list", "pods", namespace=namespace
        )
        assert review["allowed"] is True
        # The binding is namespaced: other namespaces stay closed.
        with pytest.raises(Forbidden):
            as_reader.list(PODS, "default")
    allowed = control_plane.kubectl("get", "pods", "-n", namespace, kubeconfig=config)
    assert allowed.returncode == 0, allowed.stderr


def test_token_request_token_authenticates_as_the_serviceaccount(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    token = control_plane.mint_token(namespace, "runner", expiration=600)
    review = kube.token_review(token)
    assert review["authenticated"] is True
    assert review["user"]["username"] == f"system:serviceaccount:{namespace}:runner"
    assert f"system:serviceaccounts:{namespace}" in review["user"]["groups"]

    custom = control_plane.mint_token(namespace, "runner", audiences=["swerollout-ingest"])
    assert kube.token_review(custom, audiences=["swerollout-ingest"])["authenticated"] is True
    # A token for another audience is not accepted by the API server itself.
    assert kube.token_review(custom).get("authenticated") is not True
    assert kube.token_review("not-a-token").get("authenticated") is not True


# A child Python that starts a control plane, prints its pids, and waits to be killed.
_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from swerollout_dev.controlplane import ControlPlane, ControlPlaneConfig
    config = ControlPlaneConfig(die_with_owner=sys.argv[2] == "die")
    plane = ControlPlane(sys.argv[1], config).start()
    print(json.dumps(plane.pids()), flush=True)
    time.sleep(600)
    """
)


def _start_child_plane(workdir: Path, *, die_with_owner: bool) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(workdir), "die" if die_with_owner else "orphan"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"child control plane did not start: {proc.communicate()[1][-3000:]}")
    return proc, json.loads(line)


def _wait_all_gone(pids: list[int], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(is_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_sigterm_to_the_owner_stops_its_control_plane(tmp_path: Path) -> None:
    proc, pids = _start_child_plane(tmp_path / "cp", die_with_owner=False)
    try:
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert all(is_alive(p) for p in pids.values())
        # A second manager must not take over (or reap) a live owner's control plane.
        with pytest.raises(WorkdirBusy):
            ControlPlane(tmp_path / "cp").start()
        assert all(is_alive(p) for p in pids.values())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert _wait_all_gone(list(pids.values()))
        assert not (tmp_path / "cp" / PIDFILE_NAME).exists()
    finally:
        proc.kill()
        proc.wait()
        for pid in pids.values():
            if is_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(tmp_path / "cp" / "etcd-data", ignore_errors=True)


def test_sigkill_of_the_owner_takes_its_control_plane_down(tmp_path: Path) -> None:
    proc, pids = _start_child_plane(tmp_path / "cp", die_with_owner=True)
    try:
        assert all(is_alive(p) for p in pids.values())
        proc.kill()
        proc.wait()
        assert _wait_all_gone(list(pids.values()))
    finally:
        for pid in pids.values():
            if is_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(tmp_path / "cp" / "etcd-data", ignore_errors=True)


def test_start_after_a_crashed_owner_reaps_the_orphans_and_stop_leaves_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "cp"
    # die_with_owner=False stands for any way the kernel safety net can miss (a
    # non-main thread, a non-Linux host): the pidfile is the last line.
    proc, orphans = _start_child_plane(workdir, die_with_owner=False)
    try:
        proc.kill()  # SIGKILL: no atexit, no handler; etcd and apiserver live on
        proc.wait()
        assert all(is_alive(p) for p in orphans.values())

        plane = ControlPlane(workdir).start()
        try:
            assert _wait_all_gone(list(orphans.values()))
            fresh = plane.pids()
            assert set(fresh.values()).isdisjoint(orphans.values())
            with plane.admin_client() as kube:
                assert kube.get(NAMESPACES, "default")["metadata"]["name"] == "default"
        finally:
            plane.stop(delete_data=True)
        assert _wait_all_gone(list(fresh.values()), timeout=1.0)
        assert not (workdir / "etcd-data").exists()
        assert (workdir / "pki" / "ca.crt").exists()
        assert not (workdir / PIDFILE_NAME).exists()
        assert not plane.running
    finally:
        for pid in orphans.values():
            if is_alive(pid):
                os.killpg(pid, signal.SIGKILL)


def test_a_failed_start_reports_the_log_and_leaves_nothing(tmp_path: Path) -> None:
    config = ControlPlaneConfig(extra_apiserver_args=["--no-such-flag"], start_attempts=2)
    plane = ControlPlane(tmp_path / "cp", config)
    with pytest.raises(StartupFailed) as caught:
        plane.start()
    assert "kube-apiserver exited" in str(caught.value)
    assert "no-such-flag" in str(caught.value)  # the log tail names the cause
    assert not plane.running and plane.pids() == {}
    assert not (tmp_path / "cp" / PIDFILE_NAME).exists()
    # etcd started fine each attempt and must be gone too: no process mentions the workdir.
    workdir = str((tmp_path / "cp").resolve())
    leftovers = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and is_alive(int(p.name)) and cmdline_mentions(int(p.name), workdir)
    ]
    assert leftovers == []
    shutil.rmtree(tmp_path / "cp" / "etcd-data", ignore_errors=True)
