"""A rollout's steps on the real node next to the same steps on the node agent.

For each bundled task, one oracle rollout at a time, first on `dev up` (the node
agent: pods are processes) and then on `cluster up` (a real kubelet and containerd
starting the task's image): seconds from the SWERollout's creation to

- pod Running      the rollout pod's phase reads Running,
- sandbox ready    the SandboxReady condition is True (swerex answers in the sandbox),
- first /generate  the policy server receives the rollout's first /generate,
- Succeeded        the rollout is Succeeded (graded, reward 1).

The first /generate is seen by a recording proxy in front of the oracle: it notes
when a request whose rid starts with the rollout's uid first arrives. Baseline,
measured in the same run: the node agent's figures; the ratios say what a real
kubelet, real images and real containers cost per step.

Then, on the same real node, warm starts (bench/prepared_starts.py): a cold batch of the
bundled tasks x G=4 against the same batch submitted prepared (eval pods prewarmed) and
started with `resume`: "go" -> first /generate p50/p99, runner finish -> reward beside the
tests' own time, each batch's wall time, and where a cold runner's start spends its seconds.

    python -m bench realnode             # root: `cluster up` needs it

Only one real node runs per machine: when another holds the machine's lock (a
`make test` in progress), the real-node half waits for it (up to LOCK_WAIT).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from swerollout.api import v1alpha1 as api
from swerollout.instances import SWEBenchInstance, to_api_instance
from swerollout.kube import PODS, SWEROLLOUTS, KubeClient, NotFound
from swerollout_dev.cluster.config import ClusterConfig, ClusterPaths
from swerollout_dev.cluster.supervisor import POLICY_PORT, RELEASE, RELEASE_NAMESPACE
from swerollout_dev.policy_server.launch import launch
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.tasks import INDEX_FILE, load_instances, materialize_tasks

STEPS = ("pod Running", "sandbox ready", "first /generate", "Succeeded")
NAMESPACE = "default"
POLL = 0.2
LOCK_WAIT = 7200.0  # seconds the real-node half waits for another cluster to finish


class GenerateRecorder:
    """A reverse proxy for the policy server that notes each rid's first /generate arrival."""

    def __init__(self, upstream: str, host: str) -> None:
        self.upstream, self.host = upstream.rstrip("/"), host
        # Bound here, served later: the port is known up front and nobody can take it meanwhile.
        self._socket = socket.create_server((host, 0))
        self.port = int(self._socket.getsockname()[1])
        self.first: dict[str, float] = {}  # rid -> monotonic time of its first arrival
        # rid -> tokens the policy sampled for it (meta_info.completion_tokens), also when the
        # caller was gone by the answer (a killed pod's request in flight): the work was done.
        self.sampled: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def first_generate(self, uid: str) -> float | None:
        times = [t for rid, t in list(self.first.items()) if rid.startswith(uid)]
        return min(times) if times else None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rid: object = None
        if request.path == "/generate":
            try:
                rid = json.loads(body).get("rid")
            except ValueError:
                rid = None
            if isinstance(rid, str):
                self.first.setdefault(rid, time.monotonic())
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={
                    k: v
                    for k, v in upstream.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")
                },
            )
            if request.path == "/generate" and isinstance(rid, str):
                # Read whole before answering: the count stands even if the caller is gone.
                answer = await upstream.read()
                self._count(rid, answer)
                try:
                    await response.prepare(request)
                    await response.write(answer)
                except ConnectionResetError:
                    return response  # the caller is gone (its pod was killed); the count stands
            else:
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
            return response

    def _count(self, rid: str, answer: bytes) -> None:
        try:
            meta = json.loads(answer).get("meta_info") or {}
        except (ValueError, AttributeError):
            return
        tokens = meta.get("completion_tokens")
        if isinstance(tokens, int):
            self.sampled[rid] = tokens

    async def _serve(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket).start()
        self._ready.set()

    @contextmanager
    def running(self) -> Iterator[GenerateRecorder]:
        thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        try:
            yield self
        finally:

            async def close() -> None:
                await self._runner.cleanup()
                await self._session.close()

            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(timeout=10)


def _cli(*args: str, timeout: float = 3600) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"swerollout {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def _condition_true(status: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def measure_one(
    kube: KubeClient, recorder: GenerateRecorder, instance: SWEBenchInstance, name: str, timeout: float = 900
) -> dict[str, float]:
    """Create one oracle rollout and note when each step is first seen (seconds from creation)."""
    body = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_BATCH: "bench-steps"}},
        "spec": {
            "instance": to_api_instance(instance).to_wire(),
            "inference": {"endpoint": recorder.url, "tokenizer": "qwen-2.5"},
            "sandbox": {"startupTimeoutSeconds": 900},
        },
    }
    t0 = time.monotonic()
    uid = kube.create(SWEROLLOUTS, body, NAMESPACE)["metadata"]["uid"]
    seen: dict[str, float] = {}
    deadline = t0 + timeout
    try:
        while len(seen) < len(STEPS):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: only {sorted(seen)} after {timeout:.0f}s")
            now = time.monotonic()
            status = kube.get(SWEROLLOUTS, name, NAMESPACE).get("status") or {}
            pod = (status.get("sandbox") or {}).get("podName")
            if "pod Running" not in seen and pod:
                try:
                    if (kube.get(PODS, pod, NAMESPACE).get("status") or {}).get("phase") == "Running":
                        seen["pod Running"] = now - t0
                except NotFound:
                    pass
            if "sandbox ready" not in seen and _condition_true(status, "SandboxReady"):
                seen["sandbox ready"] = now - t0
            first = recorder.first_generate(uid)
            if "first /generate" not in seen and first is not None:
                seen["first /generate"] = first - t0
            if status.get("phase") in ("Succeeded", "Failed"):
                if status["phase"] != "Succeeded" or (status.get("reward") or {}).get("value") != 1.0:
                    raise RuntimeError(f"{name}: ended {json.dumps(status)[:2000]}")
                seen["Succeeded"] = now - t0
                # A step that happened between two polls (a pod Running for less than one) counts at the end.
                for step in STEPS:
                    seen.setdefault(step, now - t0)
            time.sleep(POLL)
    finally:
        kube.delete(SWEROLLOUTS, name, NAMESPACE)
    return seen


Timings = dict[str, dict[str, float]]  # task id -> step -> seconds from creation


def _time_tasks(kubeconfig: Path, recorder: GenerateRecorder, tasks: list[SWEBenchInstance]) -> Timings:
    with KubeClient.from_kubeconfig(kubeconfig) as kube:
        return {task.instance_id: measure_one(kube, recorder, task, f"steps-{i}") for i, task in enumerate(tasks)}


@contextmanager
def dev_stack_behind_recorder(
    workdir: Path, **settings: Any
) -> Iterator[tuple[Path, GenerateRecorder, list[SWEBenchInstance]]]:
    """`dev up` over the bundled tasks, pointed at a recorder in front of the oracle (its pods
    may reach only the policy URL it is given): the admin kubeconfig, the recorder, the tasks.
    ``settings``: more settings of the oracle's server (faults, oracle_ledger)."""
    tasks = materialize_tasks(workdir / "tasks")
    with (
        launch(
            "oracle",
            subprocess=True,
            ready_timeout=900,
            tokenizer="qwen-2.5",
            tasks=str(workdir / "tasks" / INDEX_FILE),
            **settings,
        ) as oracle,
        GenerateRecorder(oracle.url, "127.0.0.1").running() as recorder,
    ):
        _cli("dev", "up", "--sglang-url", recorder.url, "--workdir", str(workdir))
        try:
            yield DevPaths.under(str(workdir)).kubeconfig, recorder, tasks
        finally:
            _cli("dev", "down", "--workdir", str(workdir))


def run_node_agent(workdir: Path) -> Timings:
    with dev_stack_behind_recorder(workdir) as (kubeconfig, recorder, tasks):
        return _time_tasks(kubeconfig, recorder, tasks)


def _wait_for_machine_lock(paths: ClusterPaths) -> None:
    """Until no other real node holds the machine's lock (the supervisor takes it for good)."""
    paths.runtime.mkdir(parents=True, exist_ok=True)
    deadline, told = time.monotonic() + LOCK_WAIT, False
    with open(paths.lock, "a+") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another real node held {paths.lock} for {LOCK_WAIT:.0f}s") from None
                if not told:
                    lock.seek(0)
                    print(f"waiting for the machine's real node to stop ({lock.read().strip()})", file=sys.stderr)
                    told = True
                time.sleep(5)
                continue
            fcntl.flock(lock, fcntl.LOCK_UN)
            return


# The real node is this 2-core machine: at the default 500m per sandbox three rollouts fit, and
# a batch of 20 would measure the scheduler's queue (as tests/support/realnode.rollout_body).
# A prepared batch holds all its pods at once: 20 pods of 100m sandbox + 100m runner requests
# (the chart's default) do not fit beside the operator's 200m, so 9 parked and 11 waited
# unschedulable for the whole wait (the 2 December run): the batches run with 20m sandboxes
# and, through the chart, 10m runners: 30m a pod (the bundle's init container asks for the
# runner's CPU), so 20 parked pods and their 20 prewarmed eval pods fit beside the operator.
REAL_NODE_SANDBOX = {"resources": {"requests": {"cpu": "20m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}}}
REAL_NODE_RUNNER_CPU = "10m"
OPERATOR_METRICS = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{RELEASE}:metrics/proxy/metrics"
"""The operator's /metrics through the API server's proxy to the chart's Service (no port
of the cluster is open to the host)."""


def _small_runner_requests(paths: ClusterPaths) -> None:
    """The operator's release again, with REAL_NODE_RUNNER_CPU as the runner's CPU request."""
    from swerollout_dev.binaries import find_binaries
    from swerollout_dev.cluster.supervisor import chart_install_args

    done = subprocess.run(
        [
            str(find_binaries().helm),
            f"--kubeconfig={paths.kubeconfig}",
            *chart_install_args(),
            "--set",
            f"operator.runnerResources.requests.cpu={REAL_NODE_RUNNER_CPU}",
            "--wait",
            "--timeout",
            "5m",
        ],
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm upgrade of the runner's requests failed: {done.stderr[-2000:]}")


def _operator_store(paths: ClusterPaths) -> Callable[[str], bytes]:
    """The chart's store is a PVC at /data in the operator's pod: a hostPath on the real node."""
    volume = paths.root / "volumes" / "operator-data"

    def read(uri: str) -> bytes:
        if not uri.startswith("file:///data/"):
            raise ValueError(f"not in the operator's /data: {uri}")
        return (volume / uri.removeprefix("file:///data/")).read_bytes()

    return read


def _cluster_up(workdir: Path, attempts: int = 5) -> None:
    """`cluster up` once no other real node runs. `cluster up` builds its images before it
    takes the machine's lock (minutes), so another run (a tests/cluster session) may take the
    lock meanwhile: then this waits for that one to stop and tries again (the images are
    built by then)."""
    for attempt in range(attempts):
        _wait_for_machine_lock(ClusterPaths.under(str(workdir)))
        try:
            _cli("cluster", "up", "--policy", "oracle", "--workdir", str(workdir))
            return
        except RuntimeError as exc:
            if "another cluster runs on this machine" not in str(exc) or attempt == attempts - 1:
                raise
            print("another real node started meanwhile; waiting for it to stop", file=sys.stderr)


def run_real_node(workdir: Path) -> tuple[Timings, dict[str, float]]:
    """`cluster up --policy oracle` (task images built and loaded); the recorder on the node IP.
    The steps one rollout at a time, then the cold and prepared batches."""
    from bench import prepared_starts  # it imports this module

    _cluster_up(workdir)
    try:
        paths, node_ip = ClusterPaths.under(str(workdir)), ClusterConfig().node_ip
        tasks = load_instances(paths.root / "tasks" / INDEX_FILE)
        with GenerateRecorder(f"http://{node_ip}:{POLICY_PORT}", node_ip).running() as recorder:
            steps = _time_tasks(paths.kubeconfig, recorder, tasks)
            _progress("real node steps", steps)
            _small_runner_requests(paths)
            batches = prepared_starts.run_batches(
                paths.kubeconfig,
                recorder,
                tasks,
                sandbox=REAL_NODE_SANDBOX,
                read=_operator_store(paths),
                metrics_url=OPERATOR_METRICS,
            )
            return steps, prepared_starts.figures(batches)
    finally:
        _cli("cluster", "down", "--workdir", str(workdir))


def _progress(what: str, figures: Any) -> None:
    """Each part's figures as it ends (stderr): a run cut short still says what it measured."""
    print(f"{what}: {json.dumps(figures, default=str)}", file=sys.stderr, flush=True)


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-steps-", dir="/var/tmp") as tmp:
        results["node agent"] = run_node_agent(Path(tmp))
    _progress("node agent steps", results["node agent"])
    with tempfile.TemporaryDirectory(prefix="bench-steps-", dir="/var/tmp") as tmp:
        results["real node"], results["real node batches"] = run_real_node(Path(tmp))
    return results


def report(results: dict[str, Any]) -> str:
    from bench import prepared_starts

    agent, real = results["node agent"], results["real node"]
    tasks = sorted(set(agent) & set(real))
    lines = [
        f"one oracle rollout at a time per bundled task ({len(tasks)} tasks); seconds from the SWERollout's "
        "creation, median (baseline: the node agent, same run):",
        f"  {'step':<16} {'node agent':>11} {'real node':>10} {'ratio':>7}",
    ]
    for step in STEPS:
        a = statistics.median(agent[t][step] for t in tasks)
        b = statistics.median(real[t][step] for t in tasks)
        lines.append(f"  {step:<16} {a:>11.1f} {b:>10.1f} {b / a if a else float('inf'):>6.2f}x")
    lines.append("  per task, node agent / real node:")
    for task in tasks:
        steps = "  ".join(f"{agent[task][step]:.1f}/{real[task][step]:.1f}" for step in STEPS)
        lines.append(f"    {task:<44} {steps}")
    lines.append(prepared_starts.report(results["real node batches"], where="on the real node"))
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
