"""The pinned binaries exist and are the versions build.sh promises."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swerollout_dev import binaries
from swerollout_dev.binaries import find_binaries, pinned_versions
from swerollout_dev.controlplane import ControlPlane


def _run(*args: str) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout + proc.stderr


def test_versions_come_from_build_script_and_match_fallback() -> None:
    versions = pinned_versions()
    assert versions.model_dump() == binaries._FALLBACK_VERSIONS
    assert str(find_binaries().dir).endswith(f"k8s-{versions.kubernetes}_etcd-{versions.etcd}_helm-{versions.helm}")


def test_each_binary_reports_its_pinned_version() -> None:
    found = find_binaries()
    v = found.versions
    assert f"Kubernetes {v.kubernetes}" in _run(str(found.kube_apiserver), "--version")
    assert f"etcd Version: {v.etcd.lstrip('v')}" in _run(str(found.etcd), "--version")
    assert v.helm in _run(str(found.helm), "version", "--short")
    client = json.loads(_run(str(found.kubectl), "version", "--client", "-o", "json"))
    assert client["clientVersion"]["gitVersion"] == v.kubernetes


def test_kubectl_version_reports_server_version(control_plane: ControlPlane) -> None:
    proc = control_plane.kubectl("version", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["serverVersion"]["gitVersion"] == control_plane.binaries.versions.kubernetes
    assert report["clientVersion"]["gitVersion"] == control_plane.binaries.versions.kubernetes


def test_missing_binary_dir_gives_build_instructions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEROLLOUT_BIN_DIR", str(tmp_path / "empty"))
    with pytest.raises(binaries.BinariesNotFound) as caught:
        find_binaries(build_if_missing=False)
    assert "hack/k8s-bin/build.sh" in str(caught.value)
    assert "kube-apiserver" in str(caught.value)


def test_wrong_version_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_binaries()
    fake_dir = tmp_path / "bin"
    fake_dir.mkdir()
    for name in ("etcd", "helm", "kubectl"):
        (fake_dir / name).symlink_to(getattr(real, name))
    fake = fake_dir / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho Kubernetes v1.0.0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SWEROLLOUT_BIN_DIR", str(fake_dir))
    with pytest.raises(binaries.BinaryVersionMismatch) as caught:
        find_binaries(build_if_missing=False)
    assert "kube-apiserver" in str(caught.value)
