"""The operator's own overhead, measured against a bare client in the same run.

    python -m bench.lifecycle [--rollouts 500]

1. Ceiling: a bare async client makes, per rollout, the API writes the operator
   makes (create the CR, look up and create the Secret, look up and create the pod,
   patch the status), as fast as the API server takes them.
2. Operator: the same number of SWERollouts created as fast as possible; the time
   from each CR's creation to its pod's creation (watched), p50/p99 and throughput,
   and the operator's peak RSS.
3. Abort fan-out: every rollout Running with a runner long-polling the ingest API;
   `spec.suspend: true` is patched on all of them; the time until every runner has
   received its abort assignment.

No pods run (the tests play the kubelet by patching pod status), so this isolates
the control side. End-to-end rollouts per minute on the embedded default are
printed by `python -m bench.lifecycle --e2e N` (slow: real pods).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from swerollout.api import v1alpha1 as api
from swerollout.dev.controlplane import ControlPlane
from swerollout.kube import NAMESPACES, PODS, SECRETS, SWEROLLOUTS, AsyncKubeClient, load_kubeconfig
from swerollout.wire import ingest as wire

ROOT = Path(__file__).resolve().parents[1]
PARALLEL = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rollout(name: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "instance": {
                "instanceId": f"bench__{name}", "repo": "bench/repo", "baseCommit": "abcdef0",
                "image": "registry.example/bench:1", "problemStatement": "benchmark",
                "evaluation": {"failToPass": ["tests/test_bench.py::test_it"]},
            },
            "inference": {"endpoint": "http://127.0.0.1:9", "tokenizer": "qwen-2.5"},
            "sandbox": {"startupTimeoutSeconds": 86400},
        },
    }


async def _gather_limited(coros: list[Any], limit: int = PARALLEL) -> list[Any]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def _ensure_namespace(kube: AsyncKubeClient, name: str) -> None:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def bare_client(kube: AsyncKubeClient, n: int) -> dict[str, float]:
    """The same writes per rollout, without the operator: the ceiling."""
    ns = "baseline"
    await _ensure_namespace(kube, ns)
    latencies: list[float] = []

    async def one(i: int) -> None:
        name = f"b{i:04d}"
        start = time.monotonic()
        cr = await kube.create(SWEROLLOUTS, _rollout(name), ns)
        owner = {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": name, "uid": cr["metadata"]["uid"], "controller": True}
        writes: list[tuple[Any, dict[str, Any]]] = [
            (SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-runner", "ownerReferences": [owner]},
                       "stringData": {"t": "x"}}),
            (PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-a1", "ownerReferences": [owner]},
                    "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"]}]}}),
        ]
        for rt, body in writes:
            try:
                await kube.get(rt, body["metadata"]["name"], ns)
            except Exception:  # noqa: BLE001 - NotFound expected
                pass
            await kube.create(rt, body, ns)
        latencies.append(time.monotonic() - start)
        await kube.patch_status(SWEROLLOUTS, name, {"status": {"phase": "Starting"}}, ns)

    started = time.monotonic()
    await _gather_limited([one(i) for i in range(n)])
    elapsed = time.monotonic() - started
    return {
        "cr_to_pod_p50_s": statistics.median(latencies),
        "cr_to_pod_p99_s": _pct(latencies, 0.99),
        "rollouts_per_second": n / elapsed,
    }


class Operator:
    def __init__(self, plane: ControlPlane, workdir: Path, namespace: str) -> None:
        self.key = workdir / "key"
        self.key.write_bytes(secrets.token_bytes(32))
        self.ingest_port = _free_port()
        argv = [
            sys.executable, "-m", "swerollout_operator", "--kubeconfig", str(plane.kubeconfig_path),
            "--namespaces", namespace, "--bind-host", "127.0.0.1", "--metrics-port", str(_free_port()),
            "--ingest-port", str(self.ingest_port), "--token-key-file", str(self.key),
            "--store-url", f"file://{workdir / 'store'}", "--log-level", "WARNING",
        ]
        self.log = open(workdir / "operator.log", "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


async def operator_run(plane: ControlPlane, kube: AsyncKubeClient, n: int, workdir: Path) -> dict[str, float]:
    ns = "bench"
    await _ensure_namespace(kube, ns)
    operator = Operator(plane, workdir, ns)
    try:
        await asyncio.sleep(3)  # let kopf start watching
        created_at: dict[str, float] = {}
        pod_at: dict[str, float] = {}

        async def watch_pods() -> None:
            while len(pod_at) < n:
                async for event in kube.watch(PODS, ns, timeout_seconds=60):
                    if event.type == "ADDED":
                        owner = event.object["metadata"]["labels"].get(api.LABEL_ROLLOUT, "")
                        pod_at.setdefault(owner, time.monotonic())
                    if len(pod_at) >= n:
                        return

        watcher = asyncio.create_task(watch_pods())

        async def create(i: int) -> None:
            name = f"r{i:04d}"
            created_at[name] = time.monotonic()
            await kube.create(SWEROLLOUTS, _rollout(name), ns)

        started = time.monotonic()
        await _gather_limited([create(i) for i in range(n)])
        await asyncio.wait_for(watcher, timeout=600)
        elapsed = max(pod_at.values()) - started
        latencies = [pod_at[k] - created_at[k] for k in created_at]
        result = {
            "cr_to_pod_p50_s": statistics.median(latencies),
            "cr_to_pod_p99_s": _pct(latencies, 0.99),
            "rollouts_per_second": n / elapsed,
        }
        result.update(await abort_fan_out(kube, operator, ns, n))
        result["operator_peak_rss_mib"] = operator.peak_rss_mib()
        return result
    finally:
        operator.stop()


async def abort_fan_out(kube: AsyncKubeClient, operator: Operator, ns: str, n: int) -> dict[str, float]:
    from swerollout_operator.tokens import TokenKey, TokenKind

    names = [f"r{i:04d}" for i in range(n)]
    ready = {"status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    await _gather_limited([kube.patch_status(PODS, f"{name}-a1", ready, ns) for name in names])
    uids: dict[str, str] = {}
    deadline = time.monotonic() + 600
    while len(uids) < n:
        assert time.monotonic() < deadline, "rollouts did not all reach Running"
        items = (await kube.list(SWEROLLOUTS, ns))["items"]
        uids = {o["metadata"]["name"]: o["metadata"]["uid"] for o in items if (o.get("status") or {}).get("phase") == "Running"}
        await asyncio.sleep(1)
    key = TokenKey.from_file(operator.key)
    base = f"http://127.0.0.1:{operator.ingest_port}{wire.API_PREFIX}"
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    aborted_at: dict[str, float] = {}
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:

        async def runner(name: str) -> None:
            headers = {"Authorization": f"Bearer {key.derive(TokenKind.INGEST, ns, name, uids[name])}"}
            url = f"{base}/{ns}/{name}/{uids[name]}/assignment"
            first = (await http.get(url, headers=headers, params={"wait": "0"})).json()
            while True:
                got = (await http.get(url, headers=headers, params={"wait": "60", "after": first["id"]})).json()
                if got["kind"] == "abort":
                    aborted_at[name] = time.monotonic()
                    return
                first = got

        runners = [asyncio.create_task(runner(name)) for name in names]
        await asyncio.sleep(2)  # every runner is now parked in its long poll
        started = time.monotonic()
        await _gather_limited([kube.patch(SWEROLLOUTS, name, {"spec": {"suspend": True}}, ns) for name in names])
        patched = time.monotonic() - started
        await asyncio.wait_for(asyncio.gather(*runners), timeout=600)
    delays = [t - started for t in aborted_at.values()]
    return {
        "abort_patch_seconds": patched,
        "abort_fan_out_seconds": max(delays),
        "abort_delivery_p50_s": statistics.median(delays),
        "abort_delivery_p99_s": _pct(delays, 0.99),
    }


async def _main(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(Path(tmp) / "cp")
        plane.start()
        try:
            result = plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
            assert result.returncode == 0, result.stderr
            plane.kubectl("wait", "--for=condition=Established", "crd/swerollouts.swerollout.io", "--timeout=60s")
            kube = AsyncKubeClient(load_kubeconfig(plane.kubeconfig_path))
            try:
                baseline = await bare_client(kube, n)
                ours = await operator_run(plane, kube, n, Path(tmp))
            finally:
                await kube.aclose()
        finally:
            plane.stop(delete_data=True)
    return {
        "rollouts": n,
        "baseline": baseline,
        "operator": ours,
        "throughput_ratio_vs_baseline": ours["rollouts_per_second"] / baseline["rollouts_per_second"],
        "p50_latency_ratio_vs_baseline": ours["cr_to_pod_p50_s"] / baseline["cr_to_pod_p50_s"],
    }


def run(rollouts: int = 500) -> dict[str, Any]:
    return asyncio.run(_main(rollouts))


def report(result: dict[str, Any]) -> str:
    b, o = result["baseline"], result["operator"]
    lines = [
        f"lifecycle: {result['rollouts']} SWERollouts, CR created -> pod created",
        f"  bare client (ceiling): p50 {b['cr_to_pod_p50_s'] * 1000:.0f} ms  p99 {b['cr_to_pod_p99_s'] * 1000:.0f} ms  "
        f"{b['rollouts_per_second']:.1f} rollouts/s",
        f"  operator:              p50 {o['cr_to_pod_p50_s'] * 1000:.0f} ms  p99 {o['cr_to_pod_p99_s'] * 1000:.0f} ms  "
        f"{o['rollouts_per_second']:.1f} rollouts/s = {o['rollouts_per_second'] * 60:.0f} rollouts/min",
        f"  ratio operator/ceiling: throughput {result['throughput_ratio_vs_baseline']:.2f}  "
        f"p50 latency {result['p50_latency_ratio_vs_baseline']:.1f}x",
        f"  operator peak RSS {o['operator_peak_rss_mib']:.0f} MiB",
        f"  abort fan-out to {result['rollouts']} running rollouts: all delivered in {o['abort_fan_out_seconds']:.2f} s "
        f"(p50 {o['abort_delivery_p50_s']:.2f} s, p99 {o['abort_delivery_p99_s']:.2f} s; "
        f"patching spec.suspend took {o['abort_patch_seconds']:.2f} s)",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.rollouts)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
