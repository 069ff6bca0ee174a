"""What can be checked of the image without a Docker engine: the bundle layout the
pod spec relies on, the launcher's behaviour, and a lint of the Dockerfile."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from swerollout import sandbox_bundle
from swerollout.api import v1alpha1 as api
from swerollout_dev.cluster.buildinputs import logical_lines
from swerollout_operator import podspec
from swerollout_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def _pod() -> dict:
    r = api.SWERollout.model_validate(
        {
            "spec": {
                "instance": {
                    "instanceId": "a__b-1",
                    "repo": "a/b",
                    "baseCommit": "abcdef0",
                    "image": "img",
                    "problemStatement": "p",
                    "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
                },
                "inference": {"endpoint": "http://x:1", "tokenizer": "qwen-2.5"},
            }
        }
    )
    return podspec.rollout_pod(r, {"name": "r", "namespace": "n", "uid": "u"}, OperatorSettings(), attempt=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fake_bundle(tmp_path: Path) -> Path:
    """A bundle laid out like the image's: python/bin/python3 is an interpreter with swe-rex."""
    src = tmp_path / "opt-bundle"
    py = src / "python" / "bin" / "python3"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    py.chmod(0o755)
    (src / "python" / "lib").mkdir()
    (src / "python" / "lib" / "marker.txt").write_text("bundled")
    return src


def test_init_container_command_installs_what_the_sandbox_command_runs(tmp_path: Path) -> None:
    pod = _pod()
    init = pod["spec"]["initContainers"][0]
    sandbox = pod["spec"]["containers"][0]
    dest = tmp_path / "swerex"
    argv = [a if a != podspec.BUNDLE_MOUNT else str(dest) for a in init["command"]]
    assert argv[0] == "swerollout"
    src = _fake_bundle(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *argv[1:], "--source", str(src)],
        check=True,
        capture_output=True,
    )
    launcher_in_pod = sandbox["command"][0]
    assert launcher_in_pod == f"{podspec.BUNDLE_MOUNT}/{sandbox_bundle.LAUNCHER}"
    launcher = dest / sandbox_bundle.LAUNCHER
    assert launcher.stat().st_mode & 0o111
    # The bundle was copied and the launcher runs the bundled interpreter, not the image's.
    assert (dest / "python" / "lib" / "marker.txt").read_text() == "bundled"
    assert launcher.read_text().splitlines()[0] == f"#!{dest}/python/bin/python3"


def test_launcher_serves_with_auth_and_refuses_an_empty_token(tmp_path: Path) -> None:
    dest = tmp_path / "swerex"
    launcher = sandbox_bundle.install(dest, _fake_bundle(tmp_path))
    token = tmp_path / "token"
    token.write_text("")
    empty = subprocess.run(
        [str(launcher)],
        env={"SWEREX_AUTH_TOKEN_FILE": str(token), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert empty.returncode != 0 and "refusing" in empty.stderr

    token.write_text("s3cret\n")
    port = _free_port()
    proc = subprocess.Popen(
        [str(launcher)],
        env={"SWEREX_AUTH_TOKEN_FILE": str(token), "SWEREX_PORT": str(port), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ok = httpx.get(f"http://127.0.0.1:{port}/is_alive", headers={"X-API-Key": "s3cret"}, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "swerex-serve never answered"
                time.sleep(0.2)
        assert ok.status_code == 200 and ok.json()["is_alive"] is True
        assert httpx.get(f"http://127.0.0.1:{port}/is_alive", timeout=2).status_code == 401
        # The token is not on the command line.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"s3cret" not in cmdline
        # The pod's readiness probe command.
        env = {"SWEREX_PORT": str(port), "PATH": "/usr/bin:/bin"}
        assert subprocess.run([str(launcher), "--probe"], env=env).returncode == 0
        closed = {"SWEREX_PORT": str(_free_port()), "PATH": "/usr/bin:/bin"}
        assert subprocess.run([str(launcher), "--probe"], env=closed, capture_output=True).returncode != 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _instructions() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in logical_lines((ROOT / "Dockerfile").read_text()):
        op, _, rest = line.partition(" ")
        out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_lint() -> None:
    ins = _instructions()
    froms = [rest for op, rest in ins if op == "FROM"]
    assert len(froms) >= 3, "multi-stage build expected"
    # Base images may come from build arguments; their defaults must be pinned.
    defaults = dict(rest.split("=", 1) for op, rest in ins if op == "ARG" and "=" in rest)
    stages: set[str] = set()
    for base in froms:
        words = base.split()
        image = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), words[0])
        if image not in stages:
            assert not image.endswith(":latest") and ":" in image, f"unpinned base image {image}"
        if len(words) == 3 and words[1].upper() == "AS":
            stages.add(words[2])
    assert not any(op == "ADD" for op, _ in ins), "use COPY, not ADD"
    # Every COPY from the build context names something that exists.
    for op, rest in ins:
        if op == "COPY" and not rest.startswith("--from"):
            *sources, _dest = rest.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
    # apt caches are dropped in the same layer.
    for op, rest in ins:
        if op == "RUN" and "apt-get install" in rest:
            assert "rm -rf /var/lib/apt/lists" in rest and "--no-install-recommends" in rest
    # The bundle lands where the installer looks for it by default.
    envs = " ".join(rest for op, rest in ins if op == "ENV")
    assert f"SWEROLLOUT_BUNDLE_SRC={sandbox_bundle.DEFAULT_BUNDLE_SOURCE}" in envs
    assert any(op == "COPY" and str(sandbox_bundle.DEFAULT_BUNDLE_SOURCE) in rest for op, rest in ins)
    # The final stage runs as the user the pod spec expects, and its default command exists.
    final = ins[max(i for i, (op, _) in enumerate(ins) if op == "FROM") :]
    users = [rest for op, rest in final if op == "USER"]
    runner = next(c for c in _pod()["spec"]["containers"] if c["name"] == "runner")
    assert users and users[-1].split(":")[0] == str(runner["securityContext"]["runAsUser"])
    cmd = next(rest for op, rest in reversed(final) if op == "CMD")
    assert "swerollout_operator" in cmd and importlib.util.find_spec("swerollout_operator") is not None
    # Runtime dependencies come from the image's own lock (tests/dev/cluster/test_image_lock.py).
    assert any(op == "RUN" and "requirements-runtime.lock" in rest for op, rest in ins)


@pytest.mark.parametrize("module", ["swerollout_operator", "agent_runner", "swerollout.cli.main"])
def test_image_entry_points_import(module: str) -> None:
    assert importlib.util.find_spec(module) is not None
