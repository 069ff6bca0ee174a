"""Warm starts: a prepared batch's "go" -> first /generate against a cold batch's creation
-> first /generate, in one run on the node agent (`dev up`, no root).

Both batches are the bundled tasks x G oracle rollouts behind a recording proxy that notes
when each rollout's first /generate arrives (bench.realnode_steps.GenerateRecorder):

- cold:     submit the batch; seconds from the submit to each rollout's first /generate;
- prepared: submit it with `prepared=True` and `reward.prewarm`, wait until every member
            is Prepared and its eval pod (made while Prepared) is Ready, then
            `resume(batch)`; seconds from the resume call to each first /generate.

From the runner's finish to the reward, per rollout: status.reward.gradedAt minus
status.result.finishedAt (the operator's receipts, milliseconds kept), printed beside
status.reward.testsSeconds, the eval script's own time: what prewarming can save is the rest.
Broken down by the eval runner's timeline (wall-clock marks logged into its stored log,
status.logs.eval; agent_runner/pod/eval_timeline.py), step by step from the finish: the
operator's Evaluating write and the eval runner's wake-up (finish -> assignment), the patch's
download, both patches' apply, the tests, the grading, the harness's cleanup, the report's
upload, and the reward report's receipt (gradedAt); and when the eval pod was ready, against
the finish (negative: it was waiting before the rollout finished). On the node agent the
operator's side of each batch is printed too, from its /metrics scraped before and after it:
its ingest answers by route, its reports' waits for a rollout's lock, its API requests' waits
for a slot, and its passes' waits for a worker (p50/p99, histogram bucket bounds).

Where a cold start's seconds go: each cold rollout's runner logs a startup timeline (seconds
since its process began: imports, tokenizer, swerex, assignment, setup, first /generate;
agent_runner/pod/startup.py) into its log, which the result store keeps (status.logs.runner);
the medians are printed.

Both batches run to the end and must earn the same rewards (the oracle resolves every
task). Also printed: each batch's wall time from its go to its last reward.

    python -m bench prepared            # the report
    python -m bench prepared --json     # the figures as JSON
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from agent_runner.pod import eval_timeline
from agent_runner.pod.startup import FIRST_GENERATE, GO, parse_line
from agent_runner.pod.startup import STEPS as STARTUP_STEPS
from bench.promtext import LATENCIES, histogram_quantiles
from bench.realnode_steps import GenerateRecorder, dev_stack_behind_recorder
from swerollout.api import v1alpha1 as api
from swerollout.client import RolloutClient
from swerollout.instances import SWEBenchInstance
from swerollout.kube import PODS, SWEROLLOUTS, KubeClient
from swerollout_dev.binaries import find_binaries
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState

NAMESPACE = "default"
GROUP = 4
POLL = 0.2
TIMEOUT = 3600.0

ReadObject = Callable[[str], bytes]
"""A result store reference (`file://...`) -> its bytes, as the bench's host sees the store."""


def read_file_ref(uri: str) -> bytes:
    """The dev stack's store: file:// paths on this host."""
    if not uri.startswith("file://"):
        raise ValueError(f"not a file:// reference: {uri}")
    return Path(uri.removeprefix("file://")).read_bytes()


OPERATOR_WAITS = ("ingest", "report_lock_wait", "api_slot_wait", "api_request", "work_queue_wait", "event_loop_lag")
"""The operator's histograms printed per batch (bench.promtext.LATENCIES): where a report's
answer and a pass's work wait."""
APISERVER_WRITES = ("apiserver_request_duration_seconds", ("verb", "resource", "subresource"))
ETCD_REQUESTS = ("etcd_request_duration_seconds", ("operation",))
"""The API server's own time for each write it answers, and its requests to etcd: whether a
slow status write is the operator's or the control plane's."""


def _scrape(metrics_url: str, kubeconfig: Path) -> str:
    """The operator's /metrics page: a URL, or a path on the API server (its proxy to a
    Service in the cluster). Right after `dev up` its server may not listen yet."""
    if not metrics_url:
        return ""
    deadline = time.monotonic() + 120
    while True:
        try:
            if metrics_url.startswith("/"):
                return _get_raw(kubeconfig, metrics_url)
            return httpx.get(metrics_url, timeout=30).raise_for_status().text
        except (httpx.TransportError, subprocess.CalledProcessError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) each process has used so far, by component name."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _cpu_stall_seconds() -> float | None:
    """Seconds in which some runnable task of this machine waited for a CPU (PSI, cumulative;
    None where the kernel has no /proc/pressure). A process that uses little CPU can still
    wait long for it: each of its waits counts here, not in its own CPU seconds."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return int(line.rsplit("total=", 1)[1]) / 1e6


def _stalled_share(before: float | None, started: float) -> float | None:
    """The share of the wall time since `started` in which some task waited for a CPU."""
    after = _cpu_stall_seconds()
    if before is None or after is None:
        return None
    return round((after - before) / max(time.monotonic() - started, 1e-9), 3)


def _scrape_apiserver(kubeconfig: Path | None) -> str:
    return "" if kubeconfig is None else _get_raw(kubeconfig, "/metrics")


def _get_raw(kubeconfig: Path, path: str) -> str:
    kubectl = find_binaries().kubectl
    argv = [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", path]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def operator_waits(after: str, before: str) -> dict[str, dict[str, dict[str, float]]]:
    """OPERATOR_WAITS observed between two scrapes of the operator's /metrics."""
    if not after:
        return {}
    return {name: histogram_quantiles(after, *LATENCIES[name], since=before) for name in OPERATOR_WAITS}


def apiserver_times(after: str, before: str) -> dict[str, dict[str, dict[str, float]]]:
    """The API server's writes (not its reads or watches) and its etcd requests between two scrapes."""
    if not after:
        return {}
    writes = histogram_quantiles(after, *APISERVER_WRITES, since=before)
    return {
        "apiserver": {k: v for k, v in writes.items() if k.split(" ")[0] in ("POST", "PATCH", "PUT", "DELETE")},
        "etcd": histogram_quantiles(after, *ETCD_REQUESTS, since=before),
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _statuses(kube: KubeClient, batch: str) -> dict[str, dict[str, Any]]:
    items = kube.list(SWEROLLOUTS, NAMESPACE, label_selector=f"swerollout.io/batch={batch}")["items"]
    return {o["metadata"]["name"]: o for o in items}


def _eval_pods_ready(kube: KubeClient, batch: str, members: int) -> None:
    """Until each member's prewarmed eval pod is Ready: preparing a batch includes them (a
    trainer's go comes a training step later; the bench's at once)."""
    deadline = time.monotonic() + TIMEOUT
    selector = f"{api.LABEL_BATCH}={batch},{api.LABEL_COMPONENT}=eval"
    while True:
        pods = kube.list(PODS, NAMESPACE, label_selector=selector)["items"]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions", [])
            )
        ]
        if len(ready) >= members:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"batch {batch}: {len(ready)} of {members} eval pods ready after {TIMEOUT:.0f}s")
        time.sleep(POLL)


def _until_done(
    kube: KubeClient, recorder: GenerateRecorder, batch: str, go: float, read: ReadObject
) -> dict[str, Any]:
    """Per rollout: seconds from `go` to its first /generate; the batch's wall time to its
    last reward; its rewards by name; finish -> reward and the tests' own time; the runners'
    startup timelines."""
    first: dict[str, float] = {}
    deadline = go + TIMEOUT
    while True:
        objects = _statuses(kube, batch)
        for name, obj in objects.items():
            at = recorder.first_generate(obj["metadata"]["uid"])
            if name not in first and at is not None:
                first[name] = at - go
        phases = {n: (o.get("status") or {}).get("phase") for n, o in objects.items()}
        if objects and all(p in ("Succeeded", "Failed") for p in phases.values()):
            wall = time.monotonic() - go
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"batch {batch} not done after {TIMEOUT:.0f}s: {phases}")
        time.sleep(POLL)
    rewards = {n: ((o.get("status") or {}).get("reward") or {}).get("value") for n, o in objects.items()}
    statuses = [o.get("status") or {} for o in objects.values()]
    failed = [n for n, p in phases.items() if p != "Succeeded"]
    if failed:
        raise RuntimeError(f"batch {batch}: {failed} did not succeed")
    return {
        "first": first,
        "wall": wall,
        "rewards": rewards,
        "finish_to_reward": [_stamp(s["reward"]["gradedAt"]) - _stamp(s["result"]["finishedAt"]) for s in statuses],
        "tests": [float(s["reward"]["testsSeconds"]) for s in statuses],
        "startup": [_timeline(s, read) for s in statuses],
        "reward_steps": [reward_steps_of(s, read) for s in statuses],
    }


# Finish -> reward, step by step: (key, from, to); "finish" is result.finishedAt and
# "reward" reward.gradedAt (the operator's receipts), the rest the eval runner's marks.
REWARD_STEPS = (
    ("evaluating", "finish", "assignment"),
    ("patch", "assignment", "patch"),
    ("apply", "patch", "applied"),
    ("tests", "applied", "tests"),
    ("grade", "tests", "graded"),
    ("cleanup", "graded", "evaluated"),
    ("upload", "evaluated", "uploaded"),
    ("report", "uploaded", "reward"),
)


def reward_steps_of(status: dict[str, Any], read: ReadObject) -> dict[str, float]:
    """Seconds of each step from the finish to the reward (REWARD_STEPS), and when the eval
    pod's runner started and was ready, against the finish."""
    ref = ((status.get("logs") or {}).get("eval") or {}).get("ref")
    marks = eval_timeline.parse_line(read(ref).decode(errors="replace")) if ref else {}
    marks["finish"] = _stamp(status["result"]["finishedAt"])
    marks["reward"] = _stamp(status["reward"]["gradedAt"])
    steps = {key: marks[end] - marks[begin] for key, begin, end in REWARD_STEPS if begin in marks and end in marks}
    for mark in ("started", "ready", "grader"):
        if mark in marks:
            steps[f"eval_{mark}_after_finish"] = marks[mark] - marks["finish"]
    return steps


def _timeline(status: dict[str, Any], read: ReadObject) -> dict[str, float]:
    ref = ((status.get("logs") or {}).get("runner") or {}).get("ref")
    return parse_line(read(ref).decode(errors="replace")) if ref else {}


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run_batches(
    kubeconfig: Path,
    recorder: GenerateRecorder,
    tasks: list[SWEBenchInstance],
    group: int = GROUP,
    *,
    sandbox: dict[str, Any] | None = None,
    read: ReadObject = read_file_ref,
    metrics_url: str = "",
    pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One cold batch, then one prepared batch, of `tasks` x `group` (the same client and stack).
    `sandbox`: more of spec.sandbox (the real node's small requests); `read`: the store as seen
    here; `metrics_url`: the operator's /metrics (a URL, or an API server proxy path), when the
    bench can reach it; `pids`: the stack's
    processes by component, whose CPU seconds in each batch are reported."""
    pids = pids or {}
    inference = {"endpoint": recorder.url, "tokenizer": "qwen-2.5"}
    sandbox = {"startupTimeoutSeconds": 1800, **(sandbox or {})}
    out: dict[str, Any] = {}
    with (
        RolloutClient.connect(kubeconfig, namespace=NAMESPACE) as client,
        KubeClient.from_kubeconfig(kubeconfig) as kube,
    ):
        plane = kubeconfig if metrics_url else None  # a control plane of our own, not a shared one
        before, plane_before, cpu = _scrape(metrics_url, kubeconfig), _scrape_apiserver(plane), _cpu_seconds(pids)
        go, stall = time.monotonic(), _cpu_stall_seconds()
        client.submit_batch(tasks, group, batch="bench-cold", inference=inference, sandbox=sandbox)
        out["cold"] = _until_done(kube, recorder, "bench-cold", go, read)
        out["cold"]["cpu_stalled"] = _stalled_share(stall, go)
        out["cold"]["cpu"] = {n: s - cpu.get(n, 0.0) for n, s in _cpu_seconds(pids).items()}
        out["cold"]["operator"] = operator_waits(_scrape(metrics_url, kubeconfig), before)
        out["cold"]["operator"] |= apiserver_times(_scrape_apiserver(plane), plane_before)

        started = time.monotonic()
        client.submit_batch(
            tasks,
            group,
            batch="bench-warm",
            inference=inference,
            sandbox=sandbox,
            reward={"prewarm": True},
            prepared=True,
        )
        prepared = client.wait_prepared("bench-warm", timeout=TIMEOUT)
        if len(prepared) != len(tasks) * group:
            raise RuntimeError(f"only {len(prepared)} of {len(tasks) * group} members prepared")
        _eval_pods_ready(kube, "bench-warm", len(prepared))
        out["prepare_seconds"] = time.monotonic() - started
        before, plane_before, cpu = _scrape(metrics_url, kubeconfig), _scrape_apiserver(plane), _cpu_seconds(pids)
        go, stall = time.monotonic(), _cpu_stall_seconds()
        client.resume("bench-warm")
        out["prepared"] = _until_done(kube, recorder, "bench-warm", go, read)
        out["prepared"]["cpu_stalled"] = _stalled_share(stall, go)
        out["prepared"]["cpu"] = {n: s - cpu.get(n, 0.0) for n, s in _cpu_seconds(pids).items()}
        out["prepared"]["operator"] = operator_waits(_scrape(metrics_url, kubeconfig), before)
        out["prepared"]["operator"] |= apiserver_times(_scrape_apiserver(plane), plane_before)
        client.delete_batch("bench-cold")
        client.delete_batch("bench-warm")
    cold, warm = out["cold"], out["prepared"]
    by_slot = {n.removeprefix("bench-cold-"): r for n, r in cold["rewards"].items()}
    if by_slot != {n.removeprefix("bench-warm-"): r for n, r in warm["rewards"].items()}:
        raise RuntimeError(f"rewards differ: cold {cold['rewards']} prepared {warm['rewards']}")
    return out


def figures(out: dict[str, Any]) -> dict[str, float]:
    cold, warm = list(out["cold"]["first"].values()), list(out["prepared"]["first"].values())
    startup = {
        f"cold_startup_{step.replace(' /', '_').replace(' ', '_')}_p50_s": statistics.median(marks)
        for step in STARTUP_STEPS
        if (marks := [t[step] for t in out["cold"]["startup"] if step in t])
    }
    return {
        "rollouts_per_batch": float(len(warm)),
        "prepared_go_to_generate_p50_s": statistics.median(warm),
        "prepared_go_to_generate_p99_s": _quantile(warm, 0.99),
        "cold_create_to_generate_p50_s": statistics.median(cold),
        "cold_create_to_generate_p99_s": _quantile(cold, 0.99),
        **_runner_go(out["prepared"]["startup"]),
        "prepare_seconds": out["prepare_seconds"],
        "cold_finish_to_reward_p50_s": statistics.median(out["cold"]["finish_to_reward"]),
        "prewarmed_finish_to_reward_p50_s": statistics.median(out["prepared"]["finish_to_reward"]),
        "cold_tests_p50_s": statistics.median(out["cold"]["tests"]),
        "prewarmed_tests_p50_s": statistics.median(out["prepared"]["tests"]),
        "cold_batch_wall_s": out["cold"]["wall"],
        "prepared_batch_wall_s": out["prepared"]["wall"],
        **startup,
        **step_medians("cold", out["cold"]["reward_steps"]),
        **step_medians("prewarmed", out["prepared"]["reward_steps"]),
        **waits_figures("cold", out["cold"].get("operator", {})),
        **waits_figures("prewarmed", out["prepared"].get("operator", {})),
        **{
            f"{which}_cpu_stalled_share": share
            for which, key in (("cold", "cold"), ("prewarmed", "prepared"))
            if (share := out[key].get("cpu_stalled")) is not None
        },
        **{f"cold_cpu_{n.replace('-', '_')}_s": v for n, v in out["cold"].get("cpu", {}).items()},
        **{f"prewarmed_cpu_{n.replace('-', '_')}_s": v for n, v in out["prepared"].get("cpu", {}).items()},
    }


def _runner_go(startups: list[dict[str, float]]) -> dict[str, float]:
    """The prepared runners' own share of go -> first /generate: from taking the go to
    sending the request (startup.GO), apart from the operator's and the network's."""
    own = [t[FIRST_GENERATE] - t[GO] for t in startups if GO in t and FIRST_GENERATE in t]
    if not own:
        return {}
    return {
        "prepared_runner_go_to_generate_p50_s": statistics.median(own),
        "prepared_runner_go_to_generate_p99_s": _quantile(own, 0.99),
    }


def waits_figures(which: str, waits: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """`<which>_operator_<histogram>_<split>_p50_s` / `_p99_s` for each series observed in the batch."""
    return {
        f"{which}_operator_{name}_{key.replace(' ', '_')}_{q}": row[q]
        for name, series in waits.items()
        for key, row in series.items()
        for q in ("p50_s", "p99_s")
    }


def waits_line(f: dict[str, float], which: str) -> str:
    """One line: the operator's waits during a batch (waits_figures), p50/p99 s."""
    prefix = f"{which}_operator_"
    parts = [
        f"{name.removeprefix(prefix).removesuffix('_p50_s')} {f[name]:g}/{f[name.removesuffix('p50_s') + 'p99_s']:g}"
        for name in f
        if name.startswith(prefix) and name.endswith("_p50_s")
    ]
    cpu = ", ".join(
        f"{name.removeprefix(f'{which}_cpu_').removesuffix('_s')} {f[name]:.1f}"
        for name in f
        if name.startswith(f"{which}_cpu_") and name.endswith("_s")
    )
    stalled = f.get(f"{which}_cpu_stalled_share")
    return (
        f"  {which} operator, p50/p99 s (bucket bounds): {', '.join(parts) or 'its /metrics not reachable here'}"
        + (f"\n  {which} batch, CPU seconds by component: {cpu}" if cpu else "")
        + (
            f"\n  {which} batch: some task waited for a CPU in {stalled:.0%} of its wall time (PSI)"
            if stalled is not None
            else ""
        )
    )


def step_medians(which: str, rows: list[dict[str, float]]) -> dict[str, float]:
    """`<which>_reward_<step>_p50_s` for each step of finish -> reward the timelines have."""
    keys = [key for key, _, _ in REWARD_STEPS] + [f"eval_{m}_after_finish" for m in ("started", "ready", "grader")]
    return {
        f"{which}_reward_{key}_p50_s": statistics.median(values)
        for key in keys
        if (values := [row[key] for row in rows if key in row])
    }


def reward_breakdown(f: dict[str, float], which: str) -> str:
    """One line: finish -> reward's steps (p50 s), and the eval pod's runner ready against the finish."""
    steps = ", ".join(
        f"{key} {f[name]:.2f}" for key, _, _ in REWARD_STEPS if (name := f"{which}_reward_{key}_p50_s") in f
    )
    ready = f.get(f"{which}_reward_eval_ready_after_finish_p50_s")
    when = f"; eval pod ready {ready:+.2f} s from the finish" if ready is not None else ""
    return f"  {which} finish -> reward, steps p50 s: {steps or 'no eval timeline in the eval logs'}{when}"


def run(tasks: int | None = None, group: int = GROUP) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-prepared-", dir="/var/tmp") as tmp:
        workdir = Path(tmp)
        with dev_stack_behind_recorder(workdir) as (kubeconfig, recorder, instances):
            state = DevState.read(DevPaths.under(workdir).state)
            metrics_url = state.operator_metrics_url if state else ""
            pids = {n: c.pid for n, c in (state.components if state else {}).items() if c.pid}
            out = run_batches(kubeconfig, recorder, instances[:tasks], group, metrics_url=metrics_url, pids=pids)
            return figures(out)


def report(f: dict[str, float], where: str = "on the node agent") -> str:
    ratio = f["cold_create_to_generate_p50_s"] / f["prepared_go_to_generate_p50_s"]
    timeline = ", ".join(
        f"{step} {f[key]:.1f}"
        for step in STARTUP_STEPS
        if (key := f"cold_startup_{step.replace(' /', '_').replace(' ', '_')}_p50_s") in f
    )
    return "\n".join(
        [
            f"{f['rollouts_per_batch']:.0f} oracle rollouts per batch {where} (baseline: the cold batch, same run):",
            f"  cold     create -> first /generate  p50 {f['cold_create_to_generate_p50_s']:.2f} s, "
            f"p99 {f['cold_create_to_generate_p99_s']:.2f} s",
            f"  prepared go     -> first /generate  p50 {f['prepared_go_to_generate_p50_s'] * 1000:.0f} ms, "
            f"p99 {f['prepared_go_to_generate_p99_s'] * 1000:.0f} ms  ({ratio:.0f}x sooner at p50)",
            (
                f"    of which in the runner (its go taken -> the request sent): "
                f"p50 {f['prepared_runner_go_to_generate_p50_s'] * 1000:.0f} ms, "
                f"p99 {f['prepared_runner_go_to_generate_p99_s'] * 1000:.0f} ms"
                if "prepared_runner_go_to_generate_p50_s" in f
                else "    of which in the runner: no go mark in the runner logs"
            ),
            f"  runner finish -> reward p50: cold eval pod {f['cold_finish_to_reward_p50_s']:.2f} s "
            f"(tests {f['cold_tests_p50_s']:.2f} s), prewarmed {f['prewarmed_finish_to_reward_p50_s']:.2f} s "
            f"(tests {f['prewarmed_tests_p50_s']:.2f} s)",
            reward_breakdown(f, "cold"),
            reward_breakdown(f, "prewarmed"),
            waits_line(f, "cold"),
            waits_line(f, "prewarmed"),
            f"  preparing took {f['prepare_seconds']:.1f} s (off the step's critical path); batch wall time "
            f"go -> last reward: cold {f['cold_batch_wall_s']:.1f} s, prepared {f['prepared_batch_wall_s']:.1f} s",
            f"  cold runner's start p50, s since its process began: {timeline or 'no timeline in the runner logs'}",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
