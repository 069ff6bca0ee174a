"""Pure parts of the node agent, and the process shim with real processes (no API server)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from swerollout_dev.nodeagent.config import NodeAgentConfig
from swerollout_dev.nodeagent.env import container_env, expand
from swerollout_dev.nodeagent.errors import ContainerConfigError, ImageError, ReferenceNotFound
from swerollout_dev.nodeagent.images import GitRepoImage, PythonEnvImage, resolve_argv, resolve_image
from swerollout_dev.nodeagent.isolation import Mount, bwrap_argv
from swerollout_dev.nodeagent.podspec import Pod, Toleration, Volume, tolerates
from swerollout_dev.nodeagent.process import ContainerProcess, ProcessRecord, process_tree, start_ticks
from swerollout_dev.nodeagent.volumes import materialise


def test_dollar_references_expand_like_kubernetes() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)-$(C)-$$(A)", env) == "x-y-$(C)-$(A)"


def test_env_order_sources_and_missing_references() -> None:
    pod = Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"app": "z"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "envFrom": [{"prefix": "CM_", "configMapRef": {"name": "cm"}}],
                        "env": [
                            {"name": "CM_k", "value": "overridden"},
                            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                            {
                                "name": "O",
                                "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}},
                            },
                            {"name": "D", "value": "$(S)/$(L)"},
                        ],
                    }
                ]
            },
        }
    )
    objects = {("ConfigMap", "cm"): {"k": b"v", "j": b"w"}, ("Secret", "s"): {"k": b"secret"}}
    env = container_env(pod, pod.spec.containers[0], lambda kind, name: objects.get((kind, name)), "127.0.0.1")
    assert env == {"CM_k": "overridden", "CM_j": "w", "S": "secret", "L": "z", "D": "secret/z"}
    with pytest.raises(ReferenceNotFound, match="'s'"):
        container_env(
            pod, pod.spec.containers[0], lambda kind, name: objects.get((kind, name)) if kind != "Secret" else None, ""
        )


def test_tolerations_match_the_taint() -> None:
    assert tolerates(
        [Toleration(key="swerollout.io/local", operator="Exists")], "swerollout.io/local", "true", "NoSchedule"
    )
    assert tolerates([Toleration(operator="Exists")], "swerollout.io/local", "true", "NoSchedule")
    assert not tolerates(
        [Toleration(key="swerollout.io/local", value="false")], "swerollout.io/local", "true", "NoSchedule"
    )
    assert not tolerates(
        [Toleration(key="swerollout.io/local", operator="Exists", effect="NoExecute")],
        "swerollout.io/local",
        "true",
        "NoSchedule",
    )


def test_images_map_to_the_python_env_a_repo_or_a_clear_error(tmp_path: Path) -> None:
    config = NodeAgentConfig(root_dir=tmp_path)
    assert isinstance(resolve_image("ghcr.io/swerollout/swerollout:0.1.0", config), PythonEnvImage)
    assert isinstance(resolve_image("swerollout:dev", config), PythonEnvImage)
    subprocess.run(["git", "init", "-q", str(tmp_path / "r")], check=True)
    assert resolve_image(f"file://{tmp_path / 'r'}", config) == GitRepoImage(tmp_path / "r")
    with pytest.raises(ImageError, match="python:3.11") as err:
        resolve_image("python:3.11", config)
    assert err.value.reason == "ErrImagePull"
    with pytest.raises(ImageError) as err:
        resolve_image(f"file://{tmp_path}", config)
    assert "not a git repository" in str(err.value)
    with pytest.raises(ContainerConfigError, match="command"):
        resolve_argv("c", "swerollout:dev", None, ["--flag"])
    assert resolve_argv("c", "x", ["a"], ["b"]) == ["a", "b"]


def test_secret_volume_items_modes_and_no_escape(tmp_path: Path) -> None:
    volume = Volume.model_validate(
        {"name": "v", "secret": {"secretName": "s", "defaultMode": 0o600, "items": [{"key": "a", "path": "sub/a"}]}}
    )
    out = materialise(volume, tmp_path, lambda kind, name: {"a": b"1", "b": b"2"})
    assert (out / "sub" / "a").read_bytes() == b"1" and not (out / "b").exists()
    assert stat.S_IMODE((out / "sub" / "a").stat().st_mode) == 0o600
    bad = Volume.model_validate({"name": "w", "configMap": {"name": "c", "items": [{"key": "a", "path": "../x"}]}})
    with pytest.raises(ContainerConfigError, match="inside the volume"):
        materialise(bad, tmp_path, lambda kind, name: {"a": b"1"})


def test_a_refreshed_secret_volume_stays_the_directory_its_containers_mount(tmp_path: Path) -> None:
    """A restarted node agent refreshes the volumes of the pods it adopts. Their running
    containers bind-mount the volume's directory: it must stay the same directory, with the
    new bytes in it, or the runner is left an empty, deleted one (its Secret gone)."""
    volume = Volume.model_validate({"name": "v", "secret": {"secretName": "s", "defaultMode": 0o400}})
    out = materialise(volume, tmp_path, lambda kind, name: {"key": b"old", "gone": b"x"})
    held = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # what a bind mount holds: the inode
    try:
        inode = out.stat().st_ino
        out = materialise(volume, tmp_path, lambda kind, name: {"key": b"new", "added": b"y"})
        assert out.stat().st_ino == inode
        seen = Path(f"/proc/self/fd/{held}")
        assert sorted(os.listdir(seen)) == ["added", "key"]
        assert (seen / "key").read_bytes() == b"new"
        assert stat.S_IMODE((seen / "added").stat().st_mode) == 0o400
        # A key the Secret lost: refused before anything changes, as the first start would.
        with pytest.raises(ReferenceNotFound, match="'added' not found"):
            items = {"items": [{"key": "key", "path": "key"}, {"key": "added", "path": "sub/added"}]}
            picky = Volume.model_validate({"name": "v", "secret": {"secretName": "s", **items}})
            materialise(picky, tmp_path, lambda kind, name: {"key": b"newer"})
        assert (seen / "key").read_bytes() == b"new"
        # A symlink a container planted in its volume is removed, never followed.
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "host-file").write_text("keep")
        (out / "planted").symlink_to(outside)
        materialise(volume, tmp_path, lambda kind, name: {"key": b"new"})
        assert (outside / "host-file").read_text() == "keep" and not (out / "planted").is_symlink()
        assert sorted(os.listdir(seen)) == ["key"]
    finally:
        os.close(held)


def test_bwrap_view_hides_paths_and_follows_symlinked_mount_points(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc" / "passwd").write_text("x")
    (host / "secret").mkdir()
    (host / "run").mkdir()
    (host / "varrun").symlink_to(host / "run")
    args = bwrap_argv(
        "bwrap",
        exposed=[host],
        hidden=[host / "secret"],
        mounts=[
            Mount(tmp_path / "vol", PurePosixPath(str(host / "etc" / "new")), True),
            Mount(tmp_path / "vol", PurePosixPath(str(host / "varrun" / "s")), False),
        ],
        private_tmp=tmp_path,
        workdir=PurePosixPath("/"),
        hostname="h",
        seccomp_file=tmp_path / "seccomp.bpf",
    )
    joined = " ".join(args)
    assert f"--ro-bind {host}/etc/passwd {host}/etc/passwd" in joined  # /etc split around the new mount point
    assert str(host / "secret") not in joined
    assert f"--bind {tmp_path}/vol {host}/run/s" in joined


async def test_shim_records_exit_codes_and_identity_survives_adoption(tmp_path: Path) -> None:
    proc = ContainerProcess.spawn(
        ["sh", "-c", "exit 7"],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "log",
        exit_file=tmp_path / "exit",
    )
    assert await proc.wait() == 7
    long = ContainerProcess.spawn(
        ["sleep", "30"], env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log2", exit_file=tmp_path / "exit2"
    )
    record = long.record
    record.dump(tmp_path / "p.json")
    while "sleep" not in process_tree(record.pid).values():  # the shim has exec'd the command
        await asyncio.sleep(0.01)
    adopted = ContainerProcess.adopt(ProcessRecord.load(tmp_path / "p.json"))  # type: ignore[arg-type]
    assert adopted.alive()
    impostor = ContainerProcess.adopt(ProcessRecord(record.pid, record.start_ticks + 1, record.exit_file))
    assert not impostor.alive()  # same pid, other start time: not ours
    await asyncio.wait_for(adopted.terminate(grace_seconds=2), 10)
    assert start_ticks(record.pid) is None or long._popen is not None and long._popen.poll() is not None
    long._popen.wait()  # type: ignore[union-attr]
    assert adopted.exit_code() == 128 + signal.SIGTERM


def test_bubblewrap_is_probed_before_use(tmp_path: Path) -> None:
    from swerollout_dev.nodeagent.isolation import bwrap_works, find_bwrap

    bwrap = find_bwrap()
    assert bwrap is not None, "hack/install-system-deps.sh installs bubblewrap"
    assert bwrap_works(bwrap, tmp_path / "f.bpf") is None
    assert bwrap_works("/bin/false", tmp_path / "f.bpf") == "exit code 1"
    assert bwrap_works("/nonexistent/bwrap", tmp_path / "f.bpf") is not None


def test_pod_loopback_addresses_are_stable_distinct_and_outside_127_0() -> None:
    from swerollout_dev.nodeagent.network import allocate_loopback

    first = allocate_loopback("uid-1", ())
    assert first == allocate_loopback("uid-1", ())
    assert first.startswith("127.") and not first.startswith("127.0.")
    assert allocate_loopback("uid-1", {first}) != first
    taken: set[str] = set()
    for i in range(500):
        taken.add(allocate_loopback(f"pod-{i}", taken))
    assert len(taken) == 500 and not any(a.endswith((".0", ".255")) for a in taken)


def test_a_readiness_probe_that_errors_counts_as_failed_and_the_prober_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe run that raises (a thread or a process that cannot be started on a loaded
    node) is one failed probe, as a kubelet's errored probe is: the container still becomes
    ready on the next success. Before, the error ended the prober and the pod stayed unready
    for good, with nothing logged."""
    from swerollout_dev.nodeagent import runtime as runtime_module

    calls: list[int] = []

    async def flaky_probe(*args: object, **kwargs: object) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("can't start new thread")
        return True

    monkeypatch.setattr(runtime_module, "probe_once", flaky_probe)
    pod = Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "swerollout:dev", "readinessProbe": {"exec": {"command": ["true"]}}}
                ]
            },
        }
    )
    config = NodeAgentConfig(root_dir=tmp_path, probe_period_seconds=0.01)
    rt = runtime_module.PodRuntime(pod, config, host=None, bwrap=None, pod_ip="127.0.0.2")  # type: ignore[arg-type]
    [slot] = rt.slots
    slot.state = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}

    async def until_ready() -> None:
        prober = asyncio.create_task(rt._readiness(slot))
        try:
            async with asyncio.timeout(10):
                while not slot.ready:
                    assert not prober.done(), prober.exception()
                    await asyncio.sleep(0.01)
        finally:
            prober.cancel()

    asyncio.run(until_ready())
    assert len(calls) >= 2
