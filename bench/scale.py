"""A whole RL step at fleet scale, on simulated nodes, per size.

    make bench BENCH=scale                       # 1,000, 5,000, 10,000, 20,000
    python -m bench scale --sizes 1000,5000 [--json] [--plot PATH]

Per size, on a fresh API server + etcd with KWOK nodes (bench/simnodes.py) and a
simulated runner in every Running pod (bench/simrunner.py, the runner's own ingest
client and retry rules):

1. ceiling: a bare client makes the writes the operator makes per rollout (the CR, the
   runner Secret, the pod, one status write: bench.lifecycle.bare_client), n at once;
2. create the batch: n SWERollouts at once; CR -> pod p50/p99, as a ratio to (1);
3. every rollout Running (KWOK runs the pods, the runners start their runs and park in a
   generation);
4. abort the batch (`AsyncRolloutClient.abort`): until every runner holds its abort, and
   every CR reads Aborted (each runner uploads a snapshot and reports);
5. resume the batch: until every runner holds its resume; then every run finishes
   (trajectory and patch uploaded), is graded in its eval pod, and reads Succeeded.

Printed per size: CR -> pod p50/p99 against the bare client's, the abort and resume
fan-out, the operator's RSS (peak, and the growth over an empty operator per rollout)
and CPU per rollout over the step, the API server's and etcd's CPU per rollout and RSS,
the API writes per rollout (the operator's: the bench's CRs, the binder's bindings and
KWOK's pod status and deletes taken out), and the watch events the API server sent per
rollout (to every watcher: the operator, KWOK, the binder and the bench's own watches).
A table, and a PNG of the per-rollout costs against the size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import lifecycle
from bench.plot import Series, line_chart
from bench.promtext import LATENCIES, histogram_quantiles
from bench.simnodes import Binder, SimulatedNodes
from bench.simrunner import SimulatedRunners
from swerollout.api.shards import LABEL_SHARD, shard_label
from swerollout.client import AsyncRolloutClient
from swerollout.kube import PODS, SECRETS, SWEROLLOUTS, ApiError, AsyncKubeClient, TransportError
from swerollout_dev.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1000, 5000, 10000, 20000)
NS = "bench"
DEFAULT_PLOT = ROOT / "bench-results" / "scale.png"
REST_SECONDS = 15.0
"""After every rollout parked, how long the bench waits to read the operator's RSS at rest
(past the 10 s after which an unread rollout drops its parsed models)."""
PODS_PER_NODE = 110
"""A kubelet's default pod limit: the simulated fleet has as many nodes as a real one would."""


def _raise_fd_limit(n: int) -> None:
    """Every runner holds a connection to the operator, which holds the other end: 20,000
    rollouts need more descriptors than the usual 20,000 (root may raise the hard limit)."""
    want = max(4 * n + 4096, 65536)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Phases:
    """One watch of the batch's SWERollouts: each rollout's phase, and waits on counts."""

    def __init__(self, kube: AsyncKubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.phase: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def count(self, phase: str) -> int:
        return sum(1 for p in self.phase.values() if p == phase)

    async def wait(self, phase: str, n: int, timeout: float) -> float | None:
        """Seconds until n rollouts read `phase`; None when `timeout` passed first."""
        start = time.monotonic()
        while self.count(phase) < n:
            left = start + timeout - time.monotonic()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 5.0))
            except TimeoutError:
                pass
        return time.monotonic() - start

    def _saw(self, obj: dict[str, Any], deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        if deleted:
            self.phase.pop(name, None)
        else:
            self.phase[name] = (obj.get("status") or {}).get("phase", "")
        self._changed.set()

    async def _run(self) -> None:
        version: str | None = None
        while True:
            try:
                if version is None:
                    listing = await self.kube.list(SWEROLLOUTS, self.namespace)
                    for obj in listing["items"]:
                        self._saw(obj)
                    version = listing["metadata"]["resourceVersion"]
                async for event in self.kube.watch(
                    SWEROLLOUTS, self.namespace, resource_version=version, timeout_seconds=300
                ):
                    version = event.object["metadata"].get("resourceVersion", version)
                    if event.type != "BOOKMARK":
                        self._saw(event.object, deleted=event.type == "DELETED")
            except asyncio.CancelledError:
                raise
            except (ApiError, TransportError):
                version = None
                await asyncio.sleep(1)


async def _wait_for(predicate: Callable[[], bool], timeout: float) -> float | None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            return None
        await asyncio.sleep(0.1)
    return time.monotonic() - start


_WATCH_EVENTS = re.compile(r"^apiserver_watch_events_total\{([^}]*)\} ([0-9.e+]+)$")


def _watch_events(plane: ControlPlane) -> Counter[str]:
    """Watch events the API server sent, by kind (to every watcher)."""
    out: Counter[str] = Counter()
    for line in plane.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        m = _WATCH_EVENTS.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[labels.get("kind") or labels.get("resource", "?")] += int(float(m.group(2)))
    return out


_OWN_REQUESTS = re.compile(r'^swerollout_api_requests_total\{method="(\w+)"\} ([0-9.e+]+)$')


def _operator_requests(operator: lifecycle.Operator) -> Counter[str]:
    """The operator's own count of its API requests, by method (its /metrics)."""
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=30).text
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _OWN_REQUESTS.match(line)
        if m:
            out[m.group(1)] += int(float(m.group(2)))
    return out


APF_WAIT = ("apiserver_flowcontrol_request_wait_duration_seconds", ("priority_level",))
"""The API server's own queueing (API Priority and Fairness), by priority level."""


def _latencies(operator: lifecycle.Operator, plane: ControlPlane) -> dict[str, dict[str, dict[str, float]]]:
    """The operator's latency histograms (LATENCIES) and the API server's queueing (APF_WAIT), so far."""
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=30).text
    out = {name: histogram_quantiles(text, metric, labels) for name, (metric, labels) in LATENCIES.items()}
    out["apiserver_queueing"] = histogram_quantiles(plane.kubectl("get", "--raw", "/metrics").stdout, *APF_WAIT)
    return out


_DB_SIZE = re.compile(r"^apiserver_storage_size_bytes\{[^}]*\} ([0-9.e+]+)$")


def _etcd_db_bytes(plane: ControlPlane) -> float:
    """etcd's database size as the API server reports it (its storage metric)."""
    for line in plane.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        m = _DB_SIZE.match(line)
        if m:
            return float(m.group(1))
    return 0.0


async def _object_bytes(kube: AsyncKubeClient, ns: str) -> dict[str, float]:
    """Mean JSON size of a sample of each kind of object a rollout keeps in etcd."""
    out = {}
    for name, rt in (("swerollout", SWEROLLOUTS), ("pod", PODS), ("secret", SECRETS)):
        items = (await kube.list(rt, ns, limit=50))["items"]
        out[name] = sum(len(json.dumps(i)) for i in items) / len(items) if items else 0.0
    return out


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


async def _clear_baseline(kube: AsyncKubeClient, ns: str) -> None:
    """The bare client's objects go before the operator's run (no operator watches them)."""
    for rt in (PODS, SECRETS, SWEROLLOUTS):
        await kube.delete_collection(rt, ns)


def _sharding(replicas: int, shards: int, i: int) -> list[str]:
    """Replica i's flags: its shards, its name in the Leases, its own address for redirects."""
    if replicas == 1:
        return []
    return ["--shards", str(shards), "--replica-id", f"replica-{i}", "--advertise-url", "http://127.0.0.1:{port}"]


def _tracked(operator: lifecycle.Operator) -> int:
    """Rollouts a replica tracks now (its phase gauges), for rollouts_per_replica."""
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=30).text
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("swerollout_rollouts{"))


def _shards_owned(operator: lifecycle.Operator) -> int:
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=30).text
    return next(
        int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("swerollout_shards_owned ")
    )


async def _all_shards_on(operator: lifecycle.Operator, shards: int, timeout: float) -> float | None:
    """Seconds until the replica holds at least `shards` shards; None when `timeout` passed first."""
    start = time.monotonic()
    while await asyncio.to_thread(_shards_owned, operator) < shards:
        if time.monotonic() - start > timeout:
            return None
        await asyncio.sleep(0.5)
    return time.monotonic() - start


async def one_size(
    n: int, *, replicas: int = 1, shards: int | None = None, kill: bool = False, stage_timeout: float | None = None
) -> dict[str, Any]:
    """One whole step at n rollouts. With `replicas` > 1 the operator runs sharded (`shards`,
    default 4 per replica) and the runners reach replica 0 (the Service), which sends each
    to its shard's owner; `kill` SIGKILLs the last replica right after the resume.

    `stage_timeout` bounds each wait of the step (default 600 s + 0.1 s a rollout): a test
    gives one well inside its own timeout, so that a stuck step returns the phases it
    reached instead of being cut off by pytest with nothing to read."""
    _raise_fd_limit(n)
    timeout = stage_timeout or 600.0 + n * 0.1
    load_start = os.getloadavg()[0]
    shards = shards or 4 * replicas
    async with lifecycle._control_plane() as (plane, kube, tmp), contextlib.AsyncExitStack() as cleanup:
        # Each process is stopped however the run ends, from the moment it exists (a failure
        # before the step, or in another stop, left a kwok running after its API server).
        base = await lifecycle.bare_client(kube, n, "base", None)
        await _clear_baseline(kube, "base")
        nodes = SimulatedNodes(plane, tmp / "kwok", max(1, -(-n // PODS_PER_NODE)))
        cleanup.callback(nodes.stop)
        await nodes.start(kube)
        await lifecycle._ensure_namespace(kube, NS)
        operator = lifecycle.Operator(plane, tmp / "operator", [NS], extra_args=_sharding(replicas, shards, 0))
        cleanup.callback(operator.stop)
        operators = [operator]
        for i in range(1, replicas):
            replica = lifecycle.Operator(
                plane, tmp / f"operator-{i}", [NS], replica_of=operator, extra_args=_sharding(replicas, shards, i)
            )
            cleanup.callback(replica.stop)
            operators.append(replica)
        binder = Binder(kube, NS, nodes.names)
        runners = SimulatedRunners(kube, NS, operator.key)
        phases = Phases(kube, NS)
        cleanup.push_async_callback(binder.stop)
        cleanup.push_async_callback(runners.stop)
        cleanup.push_async_callback(phases.stop)
        for each in operators:
            await each.ready()
        if replicas > 1:
            # Each holds its share of the shards before the batch comes (a start takes a step or two).
            for each in operators:
                await _all_shards_on(each, shards // replicas, 120)
        empty_rss = operator.rss_mib()
        binder.start()
        runners.start()
        phases.start()
        pids = {**plane.pids(), "operator": operator.proc.pid, "kwok": nodes.pid()}
        pids.update({f"operator-{i}": each.proc.pid for i, each in enumerate(operators[1:], start=1)})
        meter = lifecycle.CpuMeter(pids)
        meter.start()
        writes_before, events_before = lifecycle._api_writes(plane), _watch_events(plane)
        own_before = sum((_operator_requests(each) for each in operators), Counter[str]())
        labels = (lambda name: {LABEL_SHARD: shard_label(NS, name)}) if replicas > 1 else None
        created = await lifecycle.operator_creates(kube, NS, n, None, labels)
        running_s = await phases.wait("Running", n, timeout)
        creation_latency = await asyncio.to_thread(_latencies, operator, plane)
        parked_s = await _wait_for(lambda: len(runners.tally.parked) >= n, timeout)
        await asyncio.sleep(2)  # the last progress writes settle
        per_replica = [await asyncio.to_thread(_tracked, each) for each in operators]
        rss_parked = operator.rss_mib()
        server_rss = {name: _rss_mib(pid) for name, pid in plane.pids().items()}
        parked_bytes = await _object_bytes(kube, NS)
        parked_db = await asyncio.to_thread(_etcd_db_bytes, plane)
        # At rest: the parsed models of the burst's last rollouts are dropped 10 s after
        # their last read (PARSED_IDLE_SECONDS), so this RSS is the rollouts' own cost.
        await asyncio.sleep(REST_SECONDS)
        rss_rest = operator.rss_mib()
        async with AsyncRolloutClient(kube, NS) as client:
            started = time.monotonic()
            await client.abort(lifecycle.BATCH)
            abort_call = time.monotonic() - started
            abort_crs = await phases.wait("Aborted", n, timeout)
            abort_runners = await _wait_for(lambda: len(runners.tally.abort) >= n, 5.0)
            held_abort = max(runners.tally.abort.values()) - started if runners.tally.abort else None
            started = time.monotonic()
            await client.resume(lifecycle.BATCH)
            resume_call = time.monotonic() - started
            took_over_s = None
            if kill:
                operators[-1].kill()
                took_over_s = await _all_shards_on(operator, shards, 120)
            await _wait_for(lambda: len(runners.tally.resume) >= n, timeout)
            held_resume = max(runners.tally.resume.values()) - started if runners.tally.resume else None
            succeeded_s = await phases.wait("Succeeded", n, timeout)
        await asyncio.sleep(5)  # events and the last pod deletes are written in the background
        cpu = meter.per_rollout_ms(n)
        writes = lifecycle._api_writes(plane) - writes_before
        events = _watch_events(plane) - events_before
        alive = [each for each in operators if each.proc.poll() is None]
        own = sum((_operator_requests(each) for each in alive), Counter[str]()) - own_before
        step_latency = await asyncio.to_thread(_latencies, operator, plane)
        peak_rss = operator.peak_rss_mib()
        done_bytes = (await _object_bytes(kube, NS))["swerollout"]
        done_db = await asyncio.to_thread(_etcd_db_bytes, plane)
        phase_counts = Counter(phases.phase.values())
        attempts = Counter(
            int((o.get("status") or {}).get("attempts") or 0) for o in (await kube.list(SWEROLLOUTS, NS))["items"]
        )
    others = Counter(
        {
            "POST swerollouts": n,
            "POST pods/binding": binder.posted,
            # KWOK's final delete of every pod the operator deleted (the operator counts its own).
            "DELETE pods": writes["DELETE pods"] - own["DELETE"],
        }
    )
    for key in writes:
        if key.startswith(("PATCH pods/status", "PUT pods/status")) or "swerolloutbatches" in key:
            others[key] = writes[key]  # KWOK's pod status; the trainer's abort and resume
    operator_writes = {k: v / n for k, v in sorted((writes - others).items()) if v > 0}
    tally = runners.tally
    return {
        "rollouts": n,
        "replicas": replicas,
        "shards": shards if replicas > 1 else 0,
        "rollouts_per_replica": per_replica,
        "killed_replica": kill,
        "operator_args": list(lifecycle.OPERATOR_ARGS),
        "shards_taken_over_s": took_over_s,
        "attempts": {str(k): v for k, v in sorted(attempts.items())},
        "applied_twice": sorted(f"{name} {kind}" for (name, kind), c in tally.applied.items() if c > 1),
        "pods_created_per_rollout": sum(len(u) for u in runners.pod_uids.values()) / n,
        "pods_made_twice": sorted(name for name, uids in runners.pod_uids.items() if len(uids) > 1),
        "succeeded": phase_counts.get("Succeeded", 0),
        "stuck": n - phase_counts.get("Succeeded", 0),
        "phases_at_end": dict(phase_counts),
        "cr_to_pod_p50_s": created["cr_to_pod_p50_s"],
        "cr_to_pod_p99_s": created["cr_to_pod_p99_s"],
        "bare_cr_to_pod_p50_s": base["cr_to_pod_p50_s"],
        "bare_cr_to_pod_p99_s": base["cr_to_pod_p99_s"],
        "cr_to_pod_p50_ratio": created["cr_to_pod_p50_s"] / base["cr_to_pod_p50_s"],
        "cr_to_pod_p99_ratio": created["cr_to_pod_p99_s"] / base["cr_to_pod_p99_s"],
        "crs_created_s": created["crs_created_s"],
        "all_running_s": running_s,
        "all_parked_s": parked_s,
        "abort_call_s": abort_call,
        "abort_all_runners_s": held_abort if abort_runners is not None else None,
        "abort_all_crs_s": abort_crs,
        "resume_call_s": resume_call,
        "resume_all_runners_s": held_resume,
        "all_succeeded_s": succeeded_s,
        "operator_rss_mib_peak": peak_rss,
        "operator_rss_mib_empty": empty_rss,
        "operator_rss_mib_parked": rss_parked,
        "operator_rss_kib_per_rollout": (rss_parked - empty_rss) * 1024 / n,
        "operator_rss_mib_rest": rss_rest,
        "operator_rss_kib_per_rollout_rest": (rss_rest - empty_rss) * 1024 / n,
        "operator_cpu_ms_per_rollout": cpu["operator"],
        "apiserver_cpu_ms_per_rollout": cpu.get("kube-apiserver", 0.0),
        "etcd_cpu_ms_per_rollout": cpu.get("etcd", 0.0),
        "kwok_cpu_ms_per_rollout": cpu["kwok"],
        "bench_cpu_ms_per_rollout": cpu["bench"],
        "apiserver_rss_mib": server_rss.get("kube-apiserver", 0.0),
        "etcd_rss_mib": server_rss.get("etcd", 0.0),
        "object_bytes_parked": parked_bytes,
        "swerollout_bytes_succeeded": done_bytes,
        "etcd_db_bytes_parked": parked_db,
        "etcd_db_bytes_end": done_db,
        "operator_writes_per_rollout": operator_writes,
        "api_writes_per_rollout": sum(operator_writes.values()),
        "all_writes_per_rollout": {k: v / n for k, v in sorted(writes.items()) if v > 0},
        "others_writes": dict(others),
        "operator_requests_per_rollout": {k: v / n for k, v in sorted(own.items()) if v > 0},
        "watch_events_per_rollout": {k: v / n for k, v in sorted(events.items()) if v > 0},
        "watch_events_per_rollout_total": sum(events.values()) / n,
        "snapshot_bytes_mean": sum(tally.snapshot_bytes) / max(1, len(tally.snapshot_bytes)),
        "trajectory_bytes_mean": sum(tally.trajectory_bytes) / max(1, len(tally.trajectory_bytes)),
        "trajectory_tokens_mean": sum(tally.tokens) / max(1, len(tally.tokens)),
        "runner_errors": tally.errors[:20],
        "runner_retries": dict(runners.retries.problems),
        "ingest_latency": step_latency["ingest"],
        "creation_latency": creation_latency,
        "step_latency": step_latency,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
    }


def run(sizes: tuple[int, ...] = SIZES, replicas: int = 1) -> dict[str, Any]:
    results = []
    for n in sizes:
        print(f"scale: {n} rollouts, {replicas} operator replica(s) ...", file=sys.stderr, flush=True)
        result = asyncio.run(one_size(n, replicas=replicas))
        # Each size's figures as soon as it ends: a later size that fails loses only its own.
        print(f"scale: {n} done: {json.dumps(result)}", file=sys.stderr, flush=True)
        results.append(result)
    return {"sizes": results, "cores": os.cpu_count()}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


Column = tuple[str, str, Callable[[dict[str, Any]], str]]
COLUMNS: tuple[Column, ...] = (
    ("rollouts", "rollouts", lambda r: f"{r['rollouts']}"),
    ("ok", "Succeeded / stuck", lambda r: f"{r['succeeded']}/{r['stuck']}"),
    ("p50x", "CR->pod p50 vs bare", lambda r: f"{r['cr_to_pod_p50_ratio']:.1f}x"),
    ("p99x", "CR->pod p99 vs bare", lambda r: f"{r['cr_to_pod_p99_ratio']:.1f}x"),
    ("abrt-run", "abort: every runner (s)", lambda r: _s(r["abort_all_runners_s"])),
    ("abrt-cr", "abort: every CR Aborted (s)", lambda r: _s(r["abort_all_crs_s"])),
    ("res-run", "resume: every runner (s)", lambda r: _s(r["resume_all_runners_s"])),
    ("done", "resume -> every CR Succeeded (s)", lambda r: _s(r["all_succeeded_s"])),
    ("rss/r", "operator RSS growth per rollout (KiB)", lambda r: f"{r['operator_rss_kib_per_rollout']:.1f}"),
    (
        "rest/r",
        "the same at rest, REST_SECONDS later (KiB)",
        lambda r: (
            "-"
            if r.get("operator_rss_kib_per_rollout_rest") is None
            else f"{r['operator_rss_kib_per_rollout_rest']:.1f}"
        ),
    ),
    ("cpu/r", "operator CPU per rollout (ms)", lambda r: f"{r['operator_cpu_ms_per_rollout']:.1f}"),
    ("api/r", "API server CPU per rollout (ms)", lambda r: f"{r['apiserver_cpu_ms_per_rollout']:.1f}"),
    ("etcd/r", "etcd CPU per rollout (ms)", lambda r: f"{r['etcd_cpu_ms_per_rollout']:.1f}"),
    ("api MiB", "API server RSS, all parked (MiB)", lambda r: f"{r['apiserver_rss_mib']:.0f}"),
    ("etcd MiB", "etcd RSS, all parked (MiB)", lambda r: f"{r['etcd_rss_mib']:.0f}"),
    ("wr/r", "operator API writes per rollout", lambda r: f"{r['api_writes_per_rollout']:.2f}"),
    ("ev/r", "watch events sent per rollout", lambda r: f"{r['watch_events_per_rollout_total']:.1f}"),
)


def report(result: dict[str, Any], plot: Path | None = None) -> str:
    rows = result["sizes"]
    widths = [max(len(short), *(len(fmt(r)) for r in rows)) for short, _, fmt in COLUMNS]
    lines = [f"scale: a whole RL step per size on simulated nodes ({result['cores']} cores; one run each)"]
    lines.append("  " + "  ".join(short.rjust(w) for (short, _, _), w in zip(COLUMNS, widths)))
    for r in rows:
        lines.append("  " + "  ".join(fmt(r).rjust(w) for (_, _, fmt), w in zip(COLUMNS, widths)))
    lines.append("  columns: " + "; ".join(f"{short} = {long}" for short, long, _ in COLUMNS))
    for r in rows:
        writes = ", ".join(f"{v:.2f} {k}" for k, v in r["operator_writes_per_rollout"].items())
        events = ", ".join(f"{v:.1f} {k}" for k, v in r["watch_events_per_rollout"].items())
        lines.append(
            f"  {r['rollouts']}: CR->pod p50 {r['cr_to_pod_p50_s'] * 1000:.0f} ms / p99 {r['cr_to_pod_p99_s'] * 1000:.0f} ms "
            f"(bare client {r['bare_cr_to_pod_p50_s'] * 1000:.0f} / {r['bare_cr_to_pod_p99_s'] * 1000:.0f} ms); "
            f"operator RSS {r['operator_rss_mib_empty']:.0f} MiB empty, {r['operator_rss_mib_parked']:.0f} MiB with all "
            f"parked, peak {r['operator_rss_mib_peak']:.0f} MiB"
            + (
                f", {r['operator_rss_mib_rest']:.0f} MiB at rest {REST_SECONDS:.0f} s later "
                f"({r['operator_rss_kib_per_rollout_rest']:.1f} KiB per rollout)"
                if "operator_rss_mib_rest" in r
                else ""
            )
            + f"; writes: {writes}; watch events: {events}; "
            f"snapshot {r['snapshot_bytes_mean'] / 1024:.0f} KiB, trajectory {r['trajectory_bytes_mean'] / 1024:.0f} KiB "
            f"({r['trajectory_tokens_mean']:.0f} tokens) on average; in etcd: a SWERollout "
            f"{r['object_bytes_parked']['swerollout'] / 1024:.1f} KiB parked, {r['swerollout_bytes_succeeded'] / 1024:.1f} "
            f"KiB Succeeded, a pod {r['object_bytes_parked']['pod'] / 1024:.1f} KiB, a Secret "
            f"{r['object_bytes_parked']['secret'] / 1024:.1f} KiB; etcd db {r['etcd_db_bytes_parked'] / 2**20:.0f} MiB "
            f"parked, {r['etcd_db_bytes_end'] / 2**20:.0f} MiB at the end; load {r['load_average']['start']:.1f} -> "
            f"{r['load_average']['end']:.1f}"
            + (f"; phases at the end {r['phases_at_end']}" if r["stuck"] else "")
            + (f"; runner errors: {r['runner_errors'][:3]}" if r["runner_errors"] else "")
            + (f"; runner retries: {r['runner_retries']}" if r["runner_retries"] else "")
            + (
                f"; {r['replicas']} replicas, {r['shards']} shards, rollouts per replica {r['rollouts_per_replica']}"
                if r.get("replicas", 1) > 1
                else ""
            )
            + "; ingest answers (p50/p99, histogram bucket bounds): "
            + ", ".join(f"{route} {v['p50_s']:g}/{v['p99_s']:g} s" for route, v in sorted(r["ingest_latency"].items()))
        )
        if r.get("creation_latency"):
            lines.append(f"  {r['rollouts']}: until every rollout Running, " + _latency_line(r["creation_latency"]))
    if plot is not None:
        lines.append(f"  plot: {plot}")
    return "\n".join(lines)


def _latency_line(latency: dict[str, dict[str, dict[str, float]]]) -> str:
    """Where the time to a pod went, p50/p99 (histogram bucket bounds) with counts."""
    parts = []
    for name, per in latency.items():
        if name != "ingest" and per:
            inner = ", ".join(
                f"{key} {v['p50_s']:g}/{v['p99_s']:g} s ({v['count']:.0f})" for key, v in sorted(per.items())
            )
            parts.append(f"{name}: {inner}")
    return "; ".join(parts)


def write_plot(result: dict[str, Any], path: Path) -> Path:
    rows = result["sizes"]
    xs = [float(r["rollouts"]) for r in rows]
    panels = [
        (
            "operator CPU per rollout (ms)",
            [
                Series("operator", xs, [r["operator_cpu_ms_per_rollout"] for r in rows]),
                Series("API server", xs, [r["apiserver_cpu_ms_per_rollout"] for r in rows]),
                Series("etcd", xs, [r["etcd_cpu_ms_per_rollout"] for r in rows]),
            ],
        ),
        (
            "operator RSS growth per rollout (KiB)",
            [Series("operator", xs, [r["operator_rss_kib_per_rollout"] for r in rows])],
        ),
        (
            "API writes and watch events per rollout",
            [
                Series("operator writes", xs, [r["api_writes_per_rollout"] for r in rows]),
                Series("watch events", xs, [r["watch_events_per_rollout_total"] for r in rows]),
            ],
        ),
        (
            "seconds",
            [
                Series("abort: every CR Aborted", xs, [r["abort_all_crs_s"] or 0.0 for r in rows]),
                Series("abort: every runner", xs, [r["abort_all_runners_s"] or 0.0 for r in rows]),
                Series("CR->pod p99 / bare", xs, [r["cr_to_pod_p99_ratio"] for r in rows]),
            ],
        ),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    line_chart(panels, "rollouts", path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="comma-separated rollout counts")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--replicas", type=int, default=1, help="operator replicas (more than 1: sharded, 4 shards per replica)"
    )
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="where the PNG goes")
    parser.add_argument("--operator-args", default="", help='extra flags for every operator, e.g. "--workers 64"')
    args = parser.parse_args(argv)
    lifecycle.OPERATOR_ARGS = args.operator_args.split()
    try:
        sizes = tuple(int(s) for s in args.sizes.split(",") if s.strip())
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: give comma-separated whole numbers, e.g. --sizes 1000,5000")
    if not sizes or min(sizes) < 1:
        parser.error(f"--sizes {args.sizes!r}: give at least one size of 1 or more")
    if args.replicas < 1:
        parser.error(f"--replicas {args.replicas}: give 1 or more")
    result = run(sizes, args.replicas)
    plot = write_plot(result, args.plot)
    print(json.dumps(result, indent=2) if args.json else report(result, plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
