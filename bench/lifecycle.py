"""The operator at batch scale, measured against a bare client in the same run.

    python -m bench.lifecycle [--rollouts 500] [--rate 50] [--active 2000] [--json]
    python -m bench.lifecycle --fan-out-only [--rollouts 500]    # step 3 alone
    python -m bench.lifecycle --create-only [--rollouts 500]     # steps 1 and 2 alone
    python -m bench.lifecycle ... --profile DIR   # each operator under cProfile: DIR/*.prof, top lines printed

1. Ceiling: a bare async client makes, per rollout, the API writes the operator
   must make (create the CR, the Secret and the pod, one status write), as fast as
   the API server takes them: in one burst, and at a steady rate.
2. Operator, the same: CR created -> pod created (watched), p50/p99 and throughput,
   burst and steady; printed as ratios to the ceiling.
3. Abort fan-out: every rollout Running with a runner long-polling the ingest API;
   `AsyncRolloutClient.abort(batch)` (one write to the batch's SWERolloutBatch); the
   time until every runner holds its abort, and until every CR reads Aborted (the
   runners report their snapshot at once). Resume fan-out likewise: `resume(batch)`
   until every runner holds its resume and every CR reads Running again. Its ceiling:
   a bare client's n status patches (an abort's least), as many at once as the
   operator sends (`--api-max-in-flight`); printed as ratios to it.
4. API writes per rollout over that lifecycle (create -> Running -> Aborted ->
   Running), from the API server's own request counters, by resource and verb, with
   the bench's own writes (the CR, the kubelet's pod status) taken out; the trainer's
   abort and resume writes are counted for the whole batch.
5. Scale at rest: `--active` rollouts Running, each with a runner parked in a long
   poll: the operator's RSS, and its CPU while nothing changes.

No pods run (the bench plays the kubelet by patching pod status, and the runners
over real HTTP), so this isolates the control side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from swerollout.api import v1alpha1 as api
from swerollout.client import AsyncRolloutClient
from swerollout.kube import (
    NAMESPACES,
    PODS,
    SECRETS,
    SWEROLLOUTS,
    AsyncKubeClient,
    ServerError,
    TransportError,
    load_kubeconfig,
)
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import IngestClient
from swerollout_dev.controlplane import ControlPlane, free_port

ROOT = Path(__file__).resolve().parents[1]
PARALLEL = 32
BATCH = "bench"
RUNNER_WAIT_SECONDS = 30.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OPERATOR_ARGS: list[str] = []
"""--operator-args: extra flags for every operator the bench starts (e.g. "--workers 64")."""
PROFILE_DIR: Path | None = None
"""--profile: each operator runs under cProfile and writes DIR/operator-<step>.prof as it
stops (cProfile roughly doubles its CPU, so compare profiles, not those runs' figures)."""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rollout(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "labels": {api.LABEL_BATCH: BATCH, **(labels or {})}},
        "spec": {
            "instance": {
                "instanceId": f"bench__{name}",
                "repo": "bench/repo",
                "baseCommit": "abcdef0",
                "image": "registry.example/bench:1",
                "problemStatement": "benchmark",
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


async def _paced(n: int, rate: float | None, start_one: Any) -> None:
    """Start `start_one(i)` for i < n: all at once (bounded), or `rate` per second."""
    if rate is None:
        await _gather_limited([start_one(i) for i in range(n)])
        return
    # In flight at once: bounded like the burst, so a slow API server queues the rest
    # here (counted in their latency) instead of timing out in the connection pool.
    sem = asyncio.Semaphore(PARALLEL)

    async def one(i: int) -> None:
        async with sem:
            await start_one(i)

    t0 = time.monotonic()
    tasks = []
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


async def _ensure_namespace(kube: AsyncKubeClient, name: str) -> None:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class CpuMeter:
    """Where a step's CPU went, by process: on two shared cores the API server, etcd, the
    operator and this bench take turns, so what the operator spends is what the API
    server does not get."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self._start: dict[str, float] = {}

    def start(self) -> None:
        self._start = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}

    def per_rollout_ms(self, n: int) -> dict[str, float]:
        return {name: (_cpu_seconds(pid) - self._start[name]) * 1000 / n for name, pid in self.pids.items()}


def _summary(latencies: list[float], n: int, elapsed: float) -> dict[str, float]:
    return {
        "cr_to_pod_p50_s": statistics.median(latencies),
        "cr_to_pod_p99_s": _pct(latencies, 0.99),
        "rollouts_per_second": n / elapsed,
    }


class _OperatorBodies:
    """What the operator writes for one rollout, built by the operator's own code: the
    runner Secret, the pod (two containers, volumes, probes, security contexts: several
    KB, not a one-line pod) and the Starting status patch, so the ceiling's API server
    validates, stores and sends what the operator's does."""

    def __init__(self) -> None:
        from swerollout_operator.settings import OperatorSettings

        self.settings = OperatorSettings()
        self.rollout = api.SWERollout.model_validate(_rollout("b0000"))

    def secret(self, meta: dict[str, Any]) -> dict[str, Any]:
        from swerollout_operator import podspec

        token = secrets.token_urlsafe(32)
        return podspec.runner_secret(meta, ingest_token=token, swerex_token=token)

    def pod(self, meta: dict[str, Any]) -> dict[str, Any]:
        from swerollout_operator import podspec

        return podspec.rollout_pod(self.rollout, meta, self.settings, attempt=1)

    @staticmethod
    def starting(meta: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
        from swerollout_operator import phases

        sandbox = api.SandboxHandle.model_validate(
            {"pod_name": pod["metadata"]["name"], "pod_uid": pod["metadata"]["uid"]}
        )
        change = phases.apply(
            None,
            phases.Trigger.POD_CREATED,
            reason="PodCreated",
            message=f"pod {pod['metadata']['name']} created",
            generation=int(meta.get("generation") or 1),
            extra=api.SWERolloutStatus(attempts=1, sandbox=sandbox),
        )
        return {"status": change.status_patch}


async def bare_client(kube: AsyncKubeClient, n: int, ns: str, rate: float | None) -> dict[str, float]:
    """The same writes per rollout, without the operator: the ceiling. The bodies are the
    operator's (_OperatorBodies); kopf's finalizer write is not made (a lower bound)."""
    await _ensure_namespace(kube, ns)
    bodies = _OperatorBodies()
    latencies: list[float] = []

    async def one(i: int) -> None:
        name = f"b{i:04d}"
        start = time.monotonic()
        cr = await kube.create(SWEROLLOUTS, _rollout(name), ns)
        meta = cr["metadata"]
        await kube.create(SECRETS, bodies.secret(meta), ns)
        pod = await kube.create(PODS, bodies.pod(meta), ns)
        latencies.append(time.monotonic() - start)
        await kube.patch_status(SWEROLLOUTS, name, bodies.starting(meta, pod), ns)

    started = time.monotonic()
    await _paced(n, rate, one)
    return _summary(latencies, n, time.monotonic() - started)


def _service_account(plane: ControlPlane, directory: Path) -> Path:
    """A pod's ServiceAccount volume for the operator (token, ca.crt, namespace), bound
    to cluster-admin: the bench measures speed and memory, not RBAC (tests do that)."""
    ns, name = "swerollout-system", "bench-operator"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(plane.mint_token(ns, name, expiration=2 * 86400))
    (directory / "ca.crt").write_bytes(plane.pki.ca_cert.read_bytes())
    (directory / "namespace").write_text(ns)
    bound = plane.kubectl(
        "create",
        "clusterrolebinding",
        f"{name}-{directory.parent.name}",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={ns}:{name}",
    )
    assert bound.returncode == 0, bound.stderr
    return directory


async def bare_status_wave(kube: AsyncKubeClient, n: int, ns: str) -> float:
    """The ceiling of a fan-out: seconds for n status patches (one per rollout, what an
    abort needs at least) sent as the operator may, `api_max_in_flight` at once."""
    from swerollout_operator.settings import OperatorSettings

    in_flight = OperatorSettings.model_fields["api_max_in_flight"].default
    # Built from the API model, as the operator builds its own: the CRD requires what the
    # model requires (a hand-written partial without snapshot and abortedAt is refused).
    partial = api.Partial(
        snapshot=api.ObjectRef(ref="file:///bench/snapshot", sha256="0" * 64, bytes=1),
        turns=3,
        tokens=1000,
        aborted_at=datetime.now(UTC).replace(microsecond=0),
        reason="Suspended",
    )
    aborted = {
        "status": {"phase": "Aborted", "message": "aborted after 3 turns; snapshot kept", "partial": partial.to_patch()}
    }
    started = time.monotonic()
    await _gather_limited([kube.patch_status(SWEROLLOUTS, f"b{i:04d}", aborted, ns) for i in range(n)], in_flight)
    return time.monotonic() - started


class Operator:
    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        namespaces: list[str],
        *,
        replica_of: Operator | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """`replica_of`: another replica of that operator (its key, its store, its runners'
        ingest URL); `extra_args`: more operator flags (--shards ...), `{port}` in them its own ingest port."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.key = workdir / "key"
        if replica_of is not None:
            self.key = replica_of.key
        else:
            # Text, not raw bytes: the operator strips whitespace from its key file (a key made
            # with `echo` ends in a newline), so a random key that began or ended in a
            # whitespace byte came out short and the operator refused to start (1 start in 20).
            self.key.write_bytes(secrets.token_hex(32).encode())
        store: Path = replica_of.store if replica_of is not None else workdir / "store"
        self.store: Path = store
        self.ingest_port = free_port()
        ingest_url: str = replica_of.ingest_url if replica_of is not None else f"http://127.0.0.1:{self.ingest_port}"
        self.ingest_url: str = ingest_url
        self.metrics_port = free_port()
        # As the chart runs it: under a ServiceAccount's in-cluster identity (not an admin
        # kubeconfig, whose loader is the `kubernetes` package: 45 MB of memory).
        identity = _service_account(plane, workdir / "serviceaccount")
        host, port = plane.server_url.removeprefix("https://").rsplit(":", 1)
        env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
        env.pop("KUBECONFIG", None)
        self.profile = PROFILE_DIR / f"operator-{workdir.name}.prof" if PROFILE_DIR else None
        profiler = ["-m", "cProfile", "-o", str(self.profile)] if self.profile else []
        argv = [
            sys.executable,
            *profiler,
            "-m",
            "swerollout_operator",
            "--service-account-dir",
            str(identity),
            "--namespaces",
            ",".join(namespaces),
            "--bind-host",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--ingest-port",
            str(self.ingest_port),
            # What the pods' runner environment names (the scale bench's simulated runners read it).
            "--ingest-url",
            ingest_url,
            "--token-key-file",
            str(self.key),
            "--store-url",
            f"file://{store}",
            "--log-level",
            "WARNING",
            *OPERATOR_ARGS,
            *(a.format(port=self.ingest_port) for a in extra_args),
        ]
        self.log = open(workdir / "operator.log", "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    async def ready(self) -> None:
        async with httpx.AsyncClient() as http:
            for _ in range(600):
                try:
                    if (await http.get(f"http://127.0.0.1:{self.metrics_port}/readyz")).status_code == 200:
                        await asyncio.sleep(2)  # kopf's watches start right after
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("the operator did not become ready")

    def _status(self, key: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
        return 0

    def rss_mib(self) -> float:
        return self._status("VmRSS:") / 1024

    def peak_rss_mib(self) -> float:
        return self._status("VmHWM:") / 1024

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def kill(self) -> None:
        """SIGKILL: no cleanup, no Lease handed back (a crash, an OOM kill, a lost node)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            self.log.close()
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60 if self.profile else 20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
        if self.profile is not None and self.profile.exists():
            _print_profile(self.profile)


def _print_profile(path: Path, lines: int = 30) -> None:
    """The profile's top functions by own time and by cumulative time, to stderr."""
    import pstats

    for order in ("tottime", "cumulative"):
        print(f"== {path.name}, by {order}", file=sys.stderr)
        pstats.Stats(str(path), stream=sys.stderr).sort_stats(order).print_stats(lines)


async def _watch_pods(kube: AsyncKubeClient, ns: str, n: int, pod_at: dict[str, float]) -> None:
    def seen(pod: dict[str, Any]) -> None:
        pod_at.setdefault(pod["metadata"]["labels"].get(api.LABEL_ROLLOUT, ""), time.monotonic())

    while len(pod_at) < n:
        try:
            async for event in kube.watch(PODS, ns, timeout_seconds=60):
                if event.type == "ADDED":
                    seen(event.object)
                if len(pod_at) >= n:
                    return
        except (ServerError, TransportError) as exc:
            # A loaded API server's watch cache can lag etcd ("Too large resource version",
            # 504), or it drops the connection: watch again, and take the pods made meanwhile
            # from a list (their time is then when we saw them, a little late), in pages: one
            # list of 5,000 pods (60 MB) was cut off by the server.
            print(f"pod watch: {exc}; watching again", file=sys.stderr)
            while True:
                await asyncio.sleep(1)
                try:
                    async for pod in kube.iter_items(PODS, ns):
                        seen(pod)
                    break
                except (ServerError, TransportError) as again:
                    print(f"pod list: {again}; listing again", file=sys.stderr)


async def operator_creates(
    kube: AsyncKubeClient, ns: str, n: int, rate: float | None, labels: Callable[[str], dict[str, str]] | None = None
) -> dict[str, float]:
    created_at: dict[str, float] = {}
    pod_at: dict[str, float] = {}
    watcher = asyncio.create_task(_watch_pods(kube, ns, n, pod_at))
    await asyncio.sleep(0.5)

    async def create(i: int) -> None:
        name = f"r{i:04d}"
        created_at[name] = time.monotonic()
        await kube.create(SWEROLLOUTS, _rollout(name, labels(name) if labels else None), ns)

    started = time.monotonic()
    await _paced(n, rate, create)
    crs_created = time.monotonic() - started
    await asyncio.wait_for(watcher, timeout=1800)
    latencies = [pod_at[k] - created_at[k] for k in created_at]
    # When the CRs come faster than the operator makes pods, CR -> pod is mostly the wait
    # behind the earlier ones: how long creating the CRs took says how much.
    return {**_summary(latencies, n, max(pod_at.values()) - started), "crs_created_s": crs_created}


async def _phases(kube: AsyncKubeClient, ns: str) -> dict[str, str]:
    items = (await kube.list(SWEROLLOUTS, ns))["items"]
    return {o["metadata"]["name"]: (o.get("status") or {}).get("phase", "") for o in items}


async def _all_running(kube: AsyncKubeClient, ns: str, n: int) -> dict[str, str]:
    """Play the kubelet: every pod ready; returns name -> uid once every rollout is Running."""
    names = [f"r{i:04d}" for i in range(n)]
    ready = {"status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    await _gather_limited([kube.patch_status(PODS, f"{name}-a1", ready, ns) for name in names])
    deadline = time.monotonic() + 1800
    while True:
        items = (await kube.list(SWEROLLOUTS, ns))["items"]
        uids = {
            o["metadata"]["name"]: o["metadata"]["uid"]
            for o in items
            if (o.get("status") or {}).get("phase") == "Running"
        }
        if len(uids) >= n:
            return uids
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(uids)} of {n} rollouts reached Running")
        await asyncio.sleep(1)


async def _wait_phase(kube: AsyncKubeClient, ns: str, names: set[str], phase: str, since: float) -> float:
    """Seconds from `since` until every named rollout reads `phase` (watched)."""
    seen: set[str] = {k for k, v in (await _phases(kube, ns)).items() if v == phase and k in names}
    while seen < names:
        async for event in kube.watch(SWEROLLOUTS, ns, timeout_seconds=60):
            obj = event.object
            if (obj.get("status") or {}).get("phase") == phase and obj["metadata"]["name"] in names:
                seen.add(obj["metadata"]["name"])
            if seen >= names:
                break
    return time.monotonic() - since


class _RetryCount(logging.Handler):
    """Counts the runners' retried requests (IngestClient logs each), by problem."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.problems: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        problem = (
            str(record.args[2]) if isinstance(record.args, tuple) and len(record.args) > 2 else record.getMessage()
        )
        self.problems[problem.split(":")[0]] += 1


class Runners:
    """One fake runner per rollout over real HTTP, through the runner's own IngestClient (so
    its retry rule: a reset upload or poll is retried like the real runner's): long-polls,
    reports its abort with a snapshot, then waits for its resume and reports it started.

    Each runner has its own connection pool, as a real one (one per pod) has; they share
    one TLS context (one loaded per pool: about a GB in this process for 2,000). Not one
    pool for all: httpcore scans every connection of a pool for every request and
    response, so 500 long polls answered at once cost this process ~70 s of CPU in that
    scan, and the bench, not the operator, was what took 95 s to "hold every abort"."""

    def __init__(self, operator: Operator, ns: str, uids: dict[str, str]) -> None:
        from swerollout_operator.tokens import TokenKey, TokenKind

        self.key = TokenKey.from_file(operator.key)
        self.kind = TokenKind.INGEST
        self.ns = ns
        self.uids = uids
        self.base = f"http://127.0.0.1:{operator.ingest_port}"
        self.tls = httpx.create_ssl_context()
        self.transports: list[httpx.AsyncHTTPTransport] = []
        self.got: dict[str, dict[str, float]] = {"abort": {}, "resume": {}}
        self.parked = 0
        self.retries = _RetryCount()
        logging.getLogger("swerollout.wire.ingest").addHandler(self.retries)

    def client(self, name: str) -> IngestClient:
        uid = self.uids[name]
        token = self.key.derive(self.kind, self.ns, name, uid)
        transport = httpx.AsyncHTTPTransport(verify=self.tls, limits=httpx.Limits(max_connections=2))
        self.transports.append(transport)
        return IngestClient(self.base, namespace=self.ns, name=name, uid=uid, token=token, transport=transport)

    async def _poll_until(self, name: str, ingest: IngestClient, after: str, kind: str) -> wire.Assignment:
        while True:
            # The real runner's long poll (agent_runner/pod/session.py).
            got = await ingest.assignment(after=after, wait=RUNNER_WAIT_SECONDS)
            if got.kind.value == kind:
                self.got[kind][name] = time.monotonic()
                return got
            after = got.id

    async def run(self, name: str, lifecycle: bool) -> None:
        ingest = self.client(name)
        first = await ingest.assignment(after=None, wait=0)
        self.parked += 1
        abort = await self._poll_until(name, ingest, first.id, "abort")
        if not lifecycle:
            return
        ref = await ingest.upload(wire.ObjectKind.SNAPSHOT, f"snapshot of {name}".encode())
        await ingest.event(wire.Aborted(assignment_id=abort.id, reason="Suspended", snapshot=ref))
        resume = await self._poll_until(name, ingest, abort.id, "resume")
        await ingest.event(wire.Started(assignment_id=resume.id))

    async def aclose(self) -> None:
        logging.getLogger("swerollout.wire.ingest").removeHandler(self.retries)
        await asyncio.gather(*(t.aclose() for t in self.transports))


async def abort_resume(
    kube: AsyncKubeClient, client: AsyncRolloutClient, operator: Operator, ns: str, n: int
) -> dict[str, float]:
    uids = await _all_running(kube, ns, n)
    runners = Runners(operator, ns, uids)
    try:
        tasks = [asyncio.create_task(runners.run(name, lifecycle=True)) for name in uids]
        while runners.parked < n:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # every runner is now parked in its long poll
        started = time.monotonic()
        await client.abort(BATCH)
        marked = time.monotonic() - started
        aborted_all = await _wait_phase(kube, ns, set(uids), "Aborted", started)
        held_abort = max(runners.got["abort"].values()) - started
        started = time.monotonic()
        await client.resume(BATCH)
        unmarked = time.monotonic() - started
        running_all = await _wait_phase(kube, ns, set(uids), "Running", started)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)
        held_resume = max(runners.got["resume"].values()) - started
    finally:
        await runners.aclose()
    return {
        "abort_call_seconds": marked,
        "abort_all_runners_seconds": held_abort,
        "abort_all_crs_seconds": aborted_all,
        "resume_call_seconds": unmarked,
        "resume_all_runners_seconds": held_resume,
        "resume_all_crs_seconds": running_all,
    }


def _cpu_fraction(operator: Operator, window: float) -> float:
    """The operator's CPU over `window` seconds, as a fraction of one core."""
    cpu0, t0 = operator.cpu_seconds(), time.monotonic()
    time.sleep(window)
    return (operator.cpu_seconds() - cpu0) / (time.monotonic() - t0)


async def at_rest(
    plane: ControlPlane, kube: AsyncKubeClient, workdir: Path, n: int, window: float = 30.0
) -> dict[str, Any]:
    """A fresh operator (so nothing of the other steps is in its memory): its RSS and CPU
    with nothing to do, then with n rollouts Running, each runner parked in a long poll
    as the real runner parks (re-polling every RUNNER_WAIT_SECONDS)."""
    ns = "rest"
    await _ensure_namespace(kube, ns)
    operator = Operator(plane, workdir, [ns])
    try:
        await operator.ready()
        empty_cpu = await asyncio.to_thread(_cpu_fraction, operator, window)
        empty_rss = operator.rss_mib()
        await operator_creates(kube, ns, n, None)
        uids = await _all_running(kube, ns, n)
        runners = Runners(operator, ns, uids)
        tasks = [asyncio.create_task(runners.run(name, lifecycle=False)) for name in uids]
        try:
            while runners.parked < n:
                failed = [t for t in tasks if t.done()]
                if failed:
                    await failed[0]  # a runner that gave up: its error, not a hang
                await asyncio.sleep(0.2)
            await asyncio.sleep(5)  # the last status writes settle
            # The window spans at least one full poll cycle of every runner.
            parked_cpu = await asyncio.to_thread(_cpu_fraction, operator, max(window, RUNNER_WAIT_SECONDS + 5))
            return {
                "runner_retries": dict(runners.retries.problems),
                "active_rollouts": n,
                "rss_mib": operator.rss_mib(),
                "peak_rss_mib": operator.peak_rss_mib(),
                "parked_cpu_fraction_of_core": parked_cpu,
                "empty_rss_mib": empty_rss,
                "empty_cpu_fraction_of_core": empty_cpu,
            }
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await runners.aclose()
    finally:
        operator.stop()


_REQUEST = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def _api_writes(plane: ControlPlane) -> Counter[str]:
    """Mutating requests the API server answered, by `VERB resource[/subresource]`."""
    raw = plane.kubectl("get", "--raw", "/metrics").stdout
    out: Counter[str] = Counter()
    for line in raw.splitlines():
        m = _REQUEST.match(line)
        if not m:
            continue
        labels = dict(kv.split("=", 1) for kv in re.findall(r'(\w+="[^"]*")', m.group(1)))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") not in ("POST", "PATCH", "PUT", "DELETE", "CREATE", "UPDATE", "APPLY"):
            continue
        if labels.get("resource") not in ("swerollouts", "swerolloutbatches", "pods", "secrets", "events"):
            continue  # the API server's own leases and the like
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        out[f"{labels['verb']} {what}"] += int(float(m.group(2)))
    return out


@contextlib.asynccontextmanager
async def _control_plane() -> AsyncIterator[tuple[ControlPlane, AsyncKubeClient, Path]]:
    """A fresh API server with the CRDs, a client of it, and a scratch directory."""
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(Path(tmp) / "cp")
        plane.start()
        try:
            result = plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
            assert result.returncode == 0, result.stderr
            plane.kubectl("wait", "--for=condition=Established", "crd/swerollouts.swerollout.io", "--timeout=60s")
            # Lists of thousands on a loaded machine can take longer than the default 30 s.
            kube = AsyncKubeClient(load_kubeconfig(plane.kubeconfig_path), timeout=300)
            try:
                yield plane, kube, Path(tmp)
            finally:
                await kube.aclose()
        finally:
            plane.stop(delete_data=True)


async def _main(n: int, rate: float, active: int) -> dict[str, Any]:
    # The machine may be shared: the ratios hold within one run, the load says how far.
    load_start = os.getloadavg()[0]
    async with _control_plane() as (plane, kube, tmp):
        baseline = {
            "burst": await bare_client(kube, n, "base-burst", None),
            "status_wave_seconds": await bare_status_wave(kube, n, "base-burst"),
            "steady": await bare_client(kube, n, "base-steady", rate),
        }
        for ns in ("bench", "steady"):
            await _ensure_namespace(kube, ns)
        operator = Operator(plane, tmp / "lifecycle", ["bench", "steady"])
        try:
            await operator.ready()
            before = _api_writes(plane)
            ours: dict[str, Any] = {"burst": await operator_creates(kube, "bench", n, None)}
            async with AsyncRolloutClient(kube, "bench") as client:
                ours["fan_out"] = await abort_resume(kube, client, operator, "bench", n)
            await asyncio.sleep(5)  # events are written in the background
            delta = _api_writes(plane) - before
            ours["steady"] = await operator_creates(kube, "steady", n, rate)
            ours["peak_rss_mib"] = operator.peak_rss_mib()
        finally:
            operator.stop()
        ours["rest"] = await at_rest(plane, kube, tmp / "rest", active) if active else {}
    # The bench's own writes in that window: the CR and the kubelet's pod status.
    own = Counter({"POST swerollouts": n, "PATCH pods/status": n})
    # The trainer's abort(batch) and resume(batch): the operator never writes a batch.
    trainer = {k: v for k, v in sorted(delta.items()) if "swerolloutbatches" in k}
    operator_writes = {k: v / n for k, v in sorted((delta - own).items()) if v > 0 and k not in trainer}
    return {
        "rollouts": n,
        "rate": rate,
        "baseline": baseline,
        "operator": ours,
        "writes_per_rollout": operator_writes,
        "trainer_abort_resume_writes": trainer,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
    }


def run(rollouts: int = 500, rate: float = 50.0, active: int = 2000) -> dict[str, Any]:
    return asyncio.run(_main(rollouts, rate, active))


async def _rest_main(active: int) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    async with _control_plane() as (plane, kube, tmp):
        rest = await at_rest(plane, kube, tmp / "rest", active)
    return {"rest": rest, "load_average": {"start": load_start, "end": os.getloadavg()[0]}}


def run_rest(active: int = 2000) -> dict[str, Any]:
    """The at-rest step alone (`--rest-only`): its own API server and operator."""
    return asyncio.run(_rest_main(active))


def report_rest(rest: dict[str, Any]) -> str:
    return (
        f"  at rest, a fresh operator: with nothing to do RSS {rest['empty_rss_mib']:.0f} MiB, CPU "
        f"{rest['empty_cpu_fraction_of_core'] * 100:.1f}% of a core; with {rest['active_rollouts']} Running rollouts, "
        f"every runner parked in a {RUNNER_WAIT_SECONDS:.0f} s long poll: RSS {rest['rss_mib']:.0f} MiB "
        f"(peak {rest['peak_rss_mib']:.0f}; {(rest['rss_mib'] - rest['empty_rss_mib']) * 1024 / rest['active_rollouts']:.0f} KiB "
        f"per rollout), CPU {rest['parked_cpu_fraction_of_core'] * 100:.1f}% of a core; runner requests retried: "
        f"{', '.join(f'{v} {k}' for k, v in rest.get('runner_retries', {}).items()) or 'none'}"
    )


def report_fan_out(n: int, f: dict[str, float], wave: float) -> list[str]:
    """The abort and resume figures; the ceiling is a bare client's n status patches."""
    return [
        f"  abort {n} running: every runner holds its abort in {f['abort_all_runners_seconds']:.2f} s, every CR "
        f"Aborted in {f['abort_all_crs_seconds']:.2f} s (abort(batch) returned in {f['abort_call_seconds']:.2f} s, "
        f"so {max(0.0, f['abort_all_runners_seconds'] - f['abort_call_seconds']):.2f} s of fan-out after the last mark)",
        f"  resume {n}: every runner holds its resume in {f['resume_all_runners_seconds']:.2f} s, every CR "
        f"Running in {f['resume_all_crs_seconds']:.2f} s (resume(batch) returned in {f['resume_call_seconds']:.2f} s)",
        f"  ceiling: a bare client's {n} status patches took {wave:.2f} s; every CR Aborted = "
        f"{f['abort_all_crs_seconds'] / wave:.1f}x that, every CR Running again = {f['resume_all_crs_seconds'] / wave:.1f}x",
    ]


async def _fan_out_main(n: int) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    async with _control_plane() as (plane, kube, tmp):
        await bare_client(kube, n, "base-burst", None)
        wave = await bare_status_wave(kube, n, "base-burst")
        await _ensure_namespace(kube, "bench")
        operator = Operator(plane, tmp / "lifecycle", ["bench"])
        try:
            await operator.ready()
            await operator_creates(kube, "bench", n, None)
            async with AsyncRolloutClient(kube, "bench") as client:
                fan_out = await abort_resume(kube, client, operator, "bench", n)
        finally:
            operator.stop()
    return {
        "rollouts": n,
        "fan_out": fan_out,
        "status_wave_seconds": wave,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
    }


async def _create_main(n: int, rate: float) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    cpu: dict[str, dict[str, float]] = {}
    async with _control_plane() as (plane, kube, tmp):
        meter = CpuMeter(plane.pids())
        baseline = {}
        for mode, step_rate in (("burst", None), ("steady", rate)):
            meter.start()
            baseline[mode] = await bare_client(kube, n, f"base-{mode}", step_rate)
            cpu[f"bare {mode}"] = meter.per_rollout_ms(n)
        for ns in ("bench", "steady"):
            await _ensure_namespace(kube, ns)
        operator = Operator(plane, tmp / "lifecycle", ["bench", "steady"])
        try:
            await operator.ready()
            meter = CpuMeter({**plane.pids(), "operator": operator.proc.pid})
            ours = {}
            for mode, ns, step_rate in (("burst", "bench", None), ("steady", "steady", rate)):
                meter.start()
                ours[mode] = await operator_creates(kube, ns, n, step_rate)
                cpu[f"operator {mode}"] = meter.per_rollout_ms(n)
        finally:
            operator.stop()
    return {
        "rollouts": n,
        "rate": rate,
        "baseline": baseline,
        "operator": ours,
        "cpu_ms_per_rollout": cpu,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
    }


def run_create(rollouts: int = 500, rate: float = 50.0) -> dict[str, Any]:
    """The creation steps alone (`--create-only`): burst and steady, operator against bare client."""
    return asyncio.run(_create_main(rollouts, rate))


def run_fan_out(rollouts: int = 500) -> dict[str, Any]:
    """The abort/resume step alone (`--fan-out-only`), with its ceiling."""
    return asyncio.run(_fan_out_main(rollouts))


_WHY = {
    "POST secrets": "the runner's Secret (its two tokens)",
    "POST pods": "the rollout pod",
    "PATCH swerollouts/status": "phase transitions: Starting, Running, Aborted, Running (Resuming only when a runner "
    "has not reported its resume within --runner-report-grace-seconds)",
    "PATCH swerollouts": "kopf adds the finalizer (the store's objects are deleted with the rollout)",
    "POST events": "the SandboxReady Event (where it runs); routine steps are in the status only",
}


def report_create(result: dict[str, Any]) -> list[str]:
    """Burst and steady creation, operator against the bare client of the same run."""
    b, o, lines = result["baseline"], result["operator"], []
    for mode, title in (("burst", "one burst"), ("steady", f"steady {result['rate']:.0f} CR/s")):
        bb, oo = b[mode], o[mode]
        lines.append(
            f"  {title}: throughput {oo['rollouts_per_second']:.1f}/s vs {bb['rollouts_per_second']:.1f}/s "
            f"= {oo['rollouts_per_second'] / bb['rollouts_per_second']:.2f}x; "
            f"p50 {oo['cr_to_pod_p50_s'] * 1000:.0f} ms vs {bb['cr_to_pod_p50_s'] * 1000:.0f} ms "
            f"= {oo['cr_to_pod_p50_s'] / bb['cr_to_pod_p50_s']:.1f}x; "
            f"p99 {oo['cr_to_pod_p99_s'] * 1000:.0f} ms vs {bb['cr_to_pod_p99_s'] * 1000:.0f} ms "
            f"= {oo['cr_to_pod_p99_s'] / bb['cr_to_pod_p99_s']:.1f}x"
            + (
                f" (the {result['rollouts']} CRs were created in {oo['crs_created_s']:.1f} s)"
                if "crs_created_s" in oo
                else ""
            )
        )
    for step, by in result.get("cpu_ms_per_rollout", {}).items():
        lines.append(f"    CPU per rollout, {step}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in by.items()))
    return lines


def report(result: dict[str, Any]) -> str:
    n, b, o = result["rollouts"], result["baseline"], result["operator"]
    load = result.get("load_average", {})
    lines = [
        f"lifecycle: {n} SWERollouts, CR created -> pod created; operator / bare client in this run "
        f"(load average {load.get('start', 0):.1f} at the start, {load.get('end', 0):.1f} at the end, "
        f"{os.cpu_count()} cores)"
    ]
    lines += report_create(result)
    lines += report_fan_out(n, o["fan_out"], b["status_wave_seconds"])
    trainer = result.get("trainer_abort_resume_writes", {})
    lines.append(
        f"  the trainer's abort(batch) + resume(batch) of all {n}: {sum(trainer.values())} API writes "
        f"({', '.join(f'{v} {k}' for k, v in trainer.items()) or 'none'}: the SWERolloutBatch)"
    )
    lines.append("  API writes per rollout by the operator (create -> Running -> Aborted -> Running):")
    for what, per in result["writes_per_rollout"].items():
        lines.append(f"    {per:5.2f}  {what:28s} {_WHY.get(what, '')}")
    lines.append(f"    {sum(result['writes_per_rollout'].values()):5.2f}  total")
    rest = o["rest"]
    lines.append(
        f"  peak RSS of the operator over the steps above: {o['peak_rss_mib']:.0f} MiB ({2 * n} rollouts tracked)"
    )
    if rest:
        lines.append(report_rest(rest))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0, help="CR/s of the steady run")
    parser.add_argument("--active", type=int, default=2000, help="rollouts at rest for RSS and idle CPU (0: skip)")
    parser.add_argument("--rest-only", action="store_true", help="only the at-rest step (RSS and CPU with --active)")
    parser.add_argument("--fan-out-only", action="store_true", help="only the abort/resume step of --rollouts")
    parser.add_argument("--create-only", action="store_true", help="only the burst and steady creation steps")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run each operator under cProfile, write DIR/operator-<step>.prof, print its top lines",
    )
    parser.add_argument("--operator-args", default="", help='extra operator flags, e.g. "--workers 64"')
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    global PROFILE_DIR, OPERATOR_ARGS
    OPERATOR_ARGS = args.operator_args.split()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE_DIR = args.profile.resolve()
    if args.create_only:
        result = run_create(args.rollouts, args.rate)
        load = result["load_average"]
        lines = [f"load average {load['start']:.1f} -> {load['end']:.1f}, {os.cpu_count()} cores"]
        print(json.dumps(result, indent=2) if args.json else "\n".join(lines + report_create(result)))
        return 0
    if args.fan_out_only:
        result = run_fan_out(args.rollouts)
        load = result["load_average"]
        lines = [f"load average {load['start']:.1f} -> {load['end']:.1f}, {os.cpu_count()} cores"]
        lines += report_fan_out(args.rollouts, result["fan_out"], result["status_wave_seconds"])
        print(json.dumps(result, indent=2) if args.json else "\n".join(lines))
        return 0
    if args.rest_only:
        result = run_rest(args.active)
        load = result["load_average"]
        text = f"load average {load['start']:.1f} -> {load['end']:.1f}, {os.cpu_count()} cores\n" + report_rest(
            result["rest"]
        )
        print(json.dumps(result, indent=2) if args.json else text)
        return 0
    result = run(args.rollouts, args.rate, args.active)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
