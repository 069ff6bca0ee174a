"""Handles for the embedded default, started as a user starts it: `swerollout dev up`.

One dev stack per e2e module (control plane, chart, operator under the chart's
ServiceAccount, node agent, oracle policy server). Extra policy servers (null,
a slow tiny-lm) are started by the tests that need them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.instances import SWEBenchInstance, to_api_instance
from swerollout.kube import SWEROLLOUTS, KubeClient, NotFound
from swerollout_dev.nodeagent.layout import container_logs
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState
from swerollout_dev.tasks import load_instances, materialize_tasks

ROOT = Path(__file__).resolve().parents[2]


def swerollout_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )


@dataclass
class DevStack:
    workdir: Path
    paths: DevPaths
    kube: KubeClient
    oracle_url: str
    instances: list[SWEBenchInstance]

    def state(self) -> DevState:
        state = DevState.read(self.paths.state)
        assert state is not None, "the dev stack is not running"
        return state

    @property
    def store_dir(self) -> Path:
        return self.paths.root / "store"

    def rollout(
        self,
        name: str,
        *,
        endpoint: str,
        task: int | SWEBenchInstance = 0,
        namespace: str = "default",
        batch: str = "e2e",
        labels: dict[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """Create a rollout of bundled task number ``task`` (or of that instance), with ``labels``
        beside its batch label."""
        instance = to_api_instance(task if isinstance(task, SWEBenchInstance) else self.instances[task])
        inference: dict[str, Any] = {"endpoint": endpoint, "tokenizer": "qwen-2.5"}
        if (ref := self.state().admin_key_secret_ref()) is not None:
            # As the dev policy server's users do: the runner aborts with its admin key.
            inference["adminKeySecretRef"] = ref
        if (ref := self.state().api_key_secret_ref()) is not None:
            inference["apiKeySecretRef"] = ref  # behind the dev gateway, which requires its key
        body: dict[str, Any] = {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": {**(labels or {}), api.LABEL_BATCH: batch}},
            "spec": {
                "instance": instance.to_wire(),
                "inference": inference,
                # Counted from creation: generous, a loaded 2-core machine starts 20 sandboxes slowly.
                "sandbox": {"startupTimeoutSeconds": 900},
            },
        }
        for key, value in spec.items():
            if isinstance(value, dict) and isinstance(body["spec"].get(key), dict):
                body["spec"][key].update(value)
            else:
                body["spec"][key] = value
        return self.kube.create(SWEROLLOUTS, body, namespace)

    def get(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            return self.kube.get(SWEROLLOUTS, name, namespace)
        except NotFound:
            return None

    def status(self, name: str, namespace: str = "default") -> dict[str, Any]:
        obj = self.get(name, namespace)
        return (obj or {}).get("status") or {}

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 240) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                    for p in sorted(self.paths.logs.glob("*.log"))
                )
                raise AssertionError(f"timed out waiting for {what}\n{self.diagnostics()}\n{logs}")
            time.sleep(0.5)

    def diagnostics(self, pods: int = 6) -> str:
        """What a timed-out wait needs to be read: every pod and rollout in one line each, and the
        last lines of each container of the newest pods (the runner's own log says where it stopped)."""
        parts = [
            "--- kubectl get pods",
            self.kubectl("get", "pods", "-A", "-o", "wide", "--request-timeout=10s").stdout,
            "--- rollouts",
        ]
        try:
            for obj in self.kube.list(SWEROLLOUTS, "default").get("items") or []:
                st = obj.get("status") or {}
                parts.append(f"{obj['metadata']['name']}: {st.get('phase')} {str(st.get('message', ''))[:200]}")
        except Exception as exc:  # the API server may be the thing that is down
            parts.append(f"(cannot list: {exc})")
        base = self.paths.node / "pods"
        newest = sorted(base.iterdir(), key=lambda d: d.stat().st_mtime, reverse=True)[:pods] if base.is_dir() else []
        for pod_dir in newest:
            for container in sorted((pod_dir / "containers").glob("*")):
                runs = container_logs(pod_dir, container.name)
                tail = runs[-1].read_text(errors="replace")[-1500:] if runs else "(no log)"
                parts.append(f"--- {pod_dir.name}/{container.name}\n{tail}")
        return "\n".join(parts)

    def wait_phase(
        self, name: str, phases: set[str], timeout: float = 240, namespace: str = "default"
    ) -> dict[str, Any]:
        return self.wait(
            f"{name} in {phases}",
            lambda: (s := self.status(name, namespace)) and s.get("phase") in phases and s,
            timeout,
        )

    def set_suspend(self, name: str, value: bool, namespace: str = "default") -> None:
        self.kube.patch(SWEROLLOUTS, name, {"spec": {"suspend": value}}, namespace)

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        from swerollout_dev.binaries import find_binaries

        return subprocess.run(
            [str(find_binaries().kubectl), f"--kubeconfig={self.paths.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def stored(self, ref: dict[str, Any]) -> Path:
        """The file of an object the operator's filesystem store holds (a status ``ref``);
        a checkpoint chain's head: tests.support.checkpoints.restored_snapshot."""
        uri = ref["ref"]
        assert uri.startswith("file://"), uri
        return Path(uri[len("file://") :])

    def read_object(self, ref: dict[str, Any]) -> bytes:
        return self.stored(ref).read_bytes()


def post_json(url: str, body: dict[str, Any]) -> Any:
    import httpx

    response = httpx.post(url, json=body, timeout=30)
    response.raise_for_status()
    return response.json() if response.content else None


def dump(obj: Any) -> str:
    """A status for an assertion message; its phase and message first, which a long status
    (conditions, retries, object references) would otherwise push past the cut."""
    text = json.dumps(obj, indent=1)[:4000]
    if isinstance(obj, dict) and ("phase" in obj or "message" in obj):
        return f"phase {obj.get('phase')}: {obj.get('message')}\n{text}"
    return text


@contextmanager
def running_dev_stack(workdir: Path, *extra: str) -> Iterator[DevStack]:
    """`swerollout dev up` (oracle policy, the bundled tasks, ``extra`` flags) under ``workdir``, then `dev down`."""
    tasks = workdir / "tasks"
    materialize_tasks(tasks)
    paths = DevPaths.under(workdir)
    try:
        # Inside the try: a run interrupted while the stack comes up still brings it down.
        up = swerollout_cli(
            "dev",
            "up",
            "--policy",
            "oracle",
            "--tasks",
            str(tasks / "instances.jsonl"),
            "--workdir",
            str(workdir),
            *extra,
        )
        assert up.returncode == 0, up.stdout + up.stderr
        state = DevState.read(paths.state)
        assert state is not None and state.sglang_url
        with KubeClient.from_kubeconfig(paths.kubeconfig) as kube:
            yield DevStack(workdir, paths, kube, state.sglang_url, load_instances(tasks / "instances.jsonl"))
    finally:
        down = swerollout_cli("dev", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stdout + down.stderr


def dev_env_shell(workdir: Path) -> dict[str, str]:
    """The environment after `eval "$(swerollout dev env)"` in a clean shell."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SWEROLLOUT_"))}
    base["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    dumped = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", 'eval "$(swerollout dev env)"; env -0'],
        cwd=workdir,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dumped.returncode == 0, dumped.stderr
    return dict(item.split("=", 1) for item in dumped.stdout.split("\0") if "=" in item)
