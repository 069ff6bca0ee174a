"""The Grafana dashboard against a real Prometheus scraping the operator of a real batch.

`swerollout dev up` (control plane, the chart, the operator under its ServiceAccount, the
node agent) and a Prometheus built from its Go module, scraping the operator's /metrics
every second with the labels a ServiceMonitor gives them. A batch of three runs: one
null member (reward 0) and two oracle members, aborted mid-generation by one write to the
batch and resumed. Then every query of every panel of the chart's dashboard is evaluated
through Prometheus' HTTP API with the dashboard's variables substituted as Grafana
substitutes them (their own label_values queries): each must parse, return data, and
agree with what the batch did, read back from the rollouts' status.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from swerollout.client import RolloutClient
from swerollout.exit_status import metric_label
from swerollout.kube import SWEROLLOUTS
from swerollout_dev.policy_server.launch import launch
from swerollout_dev.stack.supervisor import RELEASE, RELEASE_NAMESPACE
from tests.support.devstack import DevStack, dump
from tests.support.prometheus import Prometheus, ScrapeTarget, is_number, running_prometheus

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "swerollout" / "dashboards" / "swerollout.json"
# A ServiceMonitor's job label is the chart's Service: its fullname, the release's name here.
JOB = RELEASE
TERMINAL = {"Succeeded", "Failed"}
# The one test also pays for the module's stack and two policy servers: 3.7 min here, 6.3
# on a machine loaded 20-fold; its waits (at most 5 min each) bound it, not the default.
pytestmark = pytest.mark.timeout(1800)
BATCH = "prom"
ORACLES = ("prom-oracle-0", "prom-oracle-1")
NULL = "prom-null"
# A panel's rate over its window times the window is the increase, up to Prometheus'
# extrapolation by at most one scrape interval.
COUNT_TOLERANCE = 0.06


@pytest.fixture(scope="module")
def prometheus(dev_stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    metrics_url = dev_stack.state().operator_metrics_url
    assert metrics_url, dump(dev_stack.state().model_dump())
    target = ScrapeTarget(
        address=metrics_url.removeprefix("http://").removesuffix("/metrics"), job=JOB, namespace=RELEASE_NAMESPACE
    )
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [target]) as prom:
        prom.wait("the operator scraped", prom.targets_up)
        yield prom


def _load(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/loads", timeout=30).json()["loads"][0])


def _panels() -> list[dict[str, Any]]:
    return list(json.loads(DASHBOARD.read_text())["panels"])


def _variables(prom: Prometheus) -> dict[str, str]:
    """Each query variable's first value, as Grafana picks it (sorted, no "All"), from its
    own label_values(selector, label) query with the variables before it substituted."""
    values: dict[str, str] = {}
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
        assert match, variable
        offered = sorted(prom.label_values(match.group(2), _substitute(match.group(1), values)))
        assert offered, f"variable {variable['name']} offers nothing"
        values[variable["name"]] = offered[0]
    return values


def _substitute(expr: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _window(expr: str) -> float:
    (window,) = set(re.findall(r"\[(\d+)m\]", expr))
    return float(window) * 60


def _unrated(expr: str) -> str:
    """The expression over the counters themselves: every rate(X[w]) becomes X."""
    return re.sub(r"\brate\(([^\[]+)\[\d+m\]\)", r"\1", expr)


def _near(value: float, expected: float) -> bool:
    return abs(value - expected) <= COUNT_TOLERANCE * max(expected, 1) + 1e-9


def _quantile_bounds(durations: list[float], buckets: tuple[float, ...], slack: float) -> tuple[float, float]:
    """Where a histogram quantile of these observations must lie: between the bucket bound
    below the smallest and the one above the largest (the observations are the operator's
    clock, the statuses' times have second resolution: `slack`)."""
    low = max([0.0, *(b for b in buckets if b <= min(durations) - slack)])
    high = min([math.inf, *(b for b in buckets if b >= max(durations) + slack)])
    return low, high


def test_every_dashboard_query_agrees_with_a_batch_aborted_and_resumed(
    dev_stack: DevStack, prometheus: Prometheus
) -> None:
    prom = prometheus
    with (
        launch(
            "oracle",
            subprocess=True,
            tokenizer="qwen-2.5",
            tasks=dev_stack.workdir / "tasks" / "instances.jsonl",
            faults={"delay_per_token": 0.05},
        ) as slow_oracle,
        launch("null", subprocess=True, tokenizer="qwen-2.5") as null,
    ):
        dev_stack.rollout(NULL, endpoint=null.url, task=2, batch=BATCH)
        for task, name in enumerate(ORACLES):
            dev_stack.rollout(name, endpoint=slow_oracle.url, task=task, batch=BATCH)
        dev_stack.wait_phase(NULL, TERMINAL, timeout=300)
        dev_stack.wait("both oracles generating", lambda: _load(slow_oracle.url)["num_running_reqs"] >= 2, timeout=300)
        with RolloutClient.connect(dev_stack.paths.kubeconfig, namespace="default") as client:
            client.abort(BATCH)
            for name in ORACLES:
                dev_stack.wait_phase(name, {"Aborted"}, timeout=120)
            variables = _variables(prom)
            assert variables == {"namespace": RELEASE_NAMESPACE, "job": JOB}
            by_title = {p["title"]: p for p in _panels()}
            aborted = _substitute(by_title["Aborted (holding a pod)"]["targets"][0]["expr"], variables)
            running = _substitute(by_title["Running rollouts"]["targets"][0]["expr"], variables)
            prom.wait("the dashboard showing both Aborted", lambda: prom.values(aborted) == {"": 2.0})
            assert prom.values(running) == {"": 0.0}
            client.resume(BATCH)
        done = {name: dev_stack.wait_phase(name, TERMINAL, timeout=300) for name in (*ORACLES, NULL)}
    for name in ORACLES:
        assert done[name]["phase"] == "Succeeded" and done[name]["reward"]["value"] == 1.0, dump(done[name])
        assert done[name]["attempts"] == 1
    assert done[NULL]["phase"] == "Succeeded" and done[NULL]["reward"]["value"] == 0.0, dump(done[NULL])

    # Every rollout the operator knows of (this module's stack ran only these).
    statuses = [r["status"] for r in dev_stack.kube.list(SWEROLLOUTS, None)["items"]]
    assert len(statuses) == 3
    at = prom.settle()
    results = {}
    for panel in _panels():
        for target in panel["targets"]:
            expr = _substitute(target["expr"], variables)
            samples = prom.query(expr, at)
            assert samples, f"panel {panel['title']!r}: no data for {expr}"
            for s in samples:
                assert is_number(float(s["value"][1])), f"panel {panel['title']!r}: {s} for {expr}"
            results[(panel["title"], target.get("legendFormat", ""))] = (expr, samples)

    def value(title: str, legend: str = "", by: str | None = None) -> dict[str, float]:
        expr, samples = results[(title, legend)]
        return {(s["metric"].get(by, "") if by else ""): float(s["value"][1]) for s in samples}

    def counts(title: str, legend: str = "", by: str | None = None) -> dict[str, float]:
        """The totals behind a rate panel: its counters at `at` (its expression with the rate
        taken off), once the panel's rate times its window is checked against their increase
        over that window (so a batch longer than the window is read right too)."""
        expr = results[(title, legend)][0]
        window, raw = _window(expr), _unrated(expr)
        now, before = prom.values(raw, by, at), prom.values(raw, by, at - window)
        rates = value(title, legend, by)
        assert set(rates) == set(now), (title, legend, rates, now)
        for key, total in now.items():
            increase = total - before.get(key, 0.0)
            # From the first event on, the rate extrapolates by under one scrape interval; a
            # window opening mid-batch may miss one increment at its edge.
            slack = COUNT_TOLERANCE * max(increase, 1) + (1.0 if any(before.values()) else 0.0)
            assert abs(rates[key] * window - increase) <= slack, (title, legend, key, rates[key] * window, increase)
        return now

    graded = [s["reward"] for s in statuses if s["reward"]["graded"]]
    assert graded, dump(statuses)
    # Rollouts by phase: the gauges are the cluster's truth.
    phases = value("Rollouts by phase", "{{phase}}", by="phase")
    assert phases["Succeeded"] == 3 and sum(phases.values()) == 3, phases
    assert value("Running rollouts") == {"": 0.0} and value("Aborted (holding a pod)") == {"": 0.0}
    # Rewards: a ratio of two rates over the same samples is exact.
    mean_reward = value("Mean reward and turns", "mean reward")[""]
    assert math.isclose(mean_reward, sum(r["value"] for r in graded) / len(graded), rel_tol=1e-6), mean_reward
    mean_turns = value("Mean reward and turns", "mean turns")[""]
    assert math.isclose(mean_turns, sum(s["result"]["turns"] for s in statuses) / 3, rel_tol=1e-6), mean_turns
    resolved = value("Resolved rate (1h)")[""]
    assert math.isclose(resolved, sum(r["resolved"] for r in graded) / len(graded), rel_tol=1e-6), resolved
    # Aborts, resumes and replays: the two oracles, each aborted once by the batch and resumed on its pod.
    aborts = counts("Aborts, resumes and replays / s", "abort {{reason}}", by="reason")
    assert aborts == {"Suspended": 2, "InferenceAborted": 0, "other": 0}, aborts
    assert counts("Aborts, resumes and replays / s", "resume") == {"": 2.0}
    assert counts("Aborts, resumes and replays / s", "replay into a fresh pod") == {"": 0.0}
    transitions = counts("Phase transitions / s", "{{phase}}", by="phase")
    assert transitions["Succeeded"] == 3 and transitions["Aborted"] == 2, transitions
    assert transitions["Failed"] == 0, transitions
    exits = counts("Exit statuses / s", "{{exit_status}}", by="exit_status")
    expected_exits = Counter(metric_label(s["result"]["exitStatus"]) for s in statuses)
    assert all(exits[k] == n for k, n in expected_exits.items()), (exits, expected_exits)
    assert not any(v for k, v in exits.items() if k not in expected_exits), exits
    # Durations: each quantile lies where the statuses' own durations put it.
    durations = [_seconds(s["completionTime"]) - _seconds(s["startTime"]) for s in statuses]
    buckets = (10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
    low, high = _quantile_bounds(durations, buckets, slack=2)
    for legend in ("p50", "p90"):
        q = value("Rollout duration (p50, p90)", legend)[""]
        assert low <= q <= high, (legend, q, durations)
    for title, legends in (
        ("Sandbox startup (p50, p99)", ("p50", "p99")),
        ("Eval duration (p50, p99)", ("p50", "p99")),
        ("Per-turn time (p50): generation vs tools", ("generation", "tools")),
        ("Abort fan-out (p50, p99)", ("p50", "p99")),
    ):
        for legend in legends:
            q = value(title, legend)[""]
            assert 0 < q < max(durations), (title, legend, q)
    # Tokens: the runners' reports, summed.
    tokens = counts("Tokens / s")[""]
    assert _near(tokens, sum(s["progress"]["generatedTokens"] for s in statuses)), (tokens, dump(statuses))
    # The operator's own health while it did all that.
    assert not any(counts("Startup failures / s by reason", "{{reason}}", by="reason").values())
    assert not any(counts("Operator health", "reconcile errors {{handler}}", by="handler").values())
    assert counts("Operator health", "status patches")[""] > 0
    pods = counts("Operator health", "pods created {{role}}", by="role")
    assert pods["rollout"] == 3 and pods["eval"] == len(graded), pods
    ingest = value("Ingest requests / s by code", "{{route}} {{code}}", by="code")
    assert ingest and all(int(code) < 500 for code in ingest), ingest
    oldest = value("Oldest rollout in each phase", "{{phase}}", by="phase")
    assert set(oldest) >= {"Pending", "Starting", "Running", "Aborted", "Resuming", "Evaluating"}
    assert not any(oldest.values()), oldest
    assert time.time() - at < 60
