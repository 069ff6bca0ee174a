"""A real Prometheus on loopback for the tests: built from its Go module by
``hack/k8s-bin/build.sh prometheus`` (cached), started with a static scrape config,
queried through its HTTP API.

The scrape config gives each target the labels a ServiceMonitor gives the chart's
Service (``job`` = the Service's name, ``namespace`` = the release namespace), so the
dashboard's queries and the alert rules meet the label set they meet in a cluster.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from swerollout_dev.controlplane import free_port

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "k8s-bin" / "build.sh"


@dataclass(frozen=True)
class PrometheusBinaries:
    prometheus: Path
    promtool: Path


@functools.cache
def prometheus_binaries() -> PrometheusBinaries:
    """The cached prometheus and promtool (build.sh builds them once, then only checks
    that each answers its pinned --version)."""
    out = subprocess.run([str(BUILD_SCRIPT), "prometheus"], capture_output=True, text=True, timeout=3600, check=False)
    assert out.returncode == 0, f"{BUILD_SCRIPT} prometheus failed:\n{out.stderr}"
    bin_dir = Path(out.stdout.strip().splitlines()[-1])
    return PrometheusBinaries(prometheus=bin_dir / "prometheus", promtool=bin_dir / "promtool")


@dataclass(frozen=True)
class ScrapeTarget:
    address: str
    """host:port serving /metrics."""
    job: str
    namespace: str


class PrometheusError(AssertionError):
    """A query Prometheus refused (a PromQL parse or evaluation error), with its message."""


@dataclass
class Prometheus:
    url: str
    log: Path
    scrape_interval: float

    def api(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query; the result as a list of {metric, value} (a scalar becomes one
        unlabelled sample)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")
        return list(data["result"])

    def values(self, expr: str, by: str | None = None, at: float | None = None) -> dict[str, float]:
        """{label value of `by` (or "" for an unlabelled result): sample value}."""
        return {
            (sample["metric"].get(by, "") if by else ""): float(sample["value"][1]) for sample in self.query(expr, at)
        }

    def parse(self, expr: str) -> dict[str, Any]:
        """Prometheus' own PromQL parser: the expression's syntax tree (raises on a parse error)."""
        return dict(self.api("parse_query", query=expr))

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's label_values(match, label) offers: GET /api/v1/label/<label>/values."""
        return list(self.api(f"label/{label}/values", **{"match[]": match}))

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def wait(self, what: str, probe: Any, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(self.scrape_interval / 2)

    def settle(self) -> float:
        """Wait until every target was scraped after now; returns now (epoch seconds), a
        time at which a query sees the state of this moment."""
        now = time.time()
        self.wait(
            "a scrape of every target after now",
            lambda: all(
                t["health"] == "up" and _epoch(t["lastScrape"]) > now + 0.01
                for t in self.api("targets")["activeTargets"]
            ),
        )
        return time.time()


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def selectors(tree: Any) -> Iterator[dict[str, Any]]:
    """Every vector and range selector of a parsed expression (nodes with a metric name)."""
    if isinstance(tree, dict):
        if tree.get("type") in ("vectorSelector", "matrixSelector"):
            yield tree
        for value in tree.values():
            yield from selectors(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from selectors(item)


def rated(tree: Any) -> Iterator[str]:
    """The metric names that rate(), irate() or increase() are applied to."""
    if isinstance(tree, dict):
        if tree.get("type") == "call" and tree["func"]["name"] in ("rate", "irate", "increase"):
            yield from (s["name"] for s in selectors(tree["args"]))
        for value in tree.values():
            yield from rated(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from rated(item)


def is_number(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def scrape_config(targets: list[ScrapeTarget], interval: float) -> dict[str, Any]:
    jobs: dict[str, list[ScrapeTarget]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t)
    return {
        "global": {"scrape_interval": f"{interval:g}s", "evaluation_interval": f"{interval:g}s"},
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": [t.address], "labels": {"namespace": t.namespace}} for t in members],
            }
            for job, members in jobs.items()
        ],
    }


@contextmanager
def running_prometheus(workdir: Path, targets: list[ScrapeTarget], interval: float = 1.0) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` every `interval` seconds, on a free loopback port."""
    binaries = prometheus_binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    # JSON is YAML: no YAML writer needed.
    config.write_text(json.dumps(scrape_config(targets, interval)))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(binaries.prometheus),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={"PATH": os.environ.get("PATH", "")},
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", log, interval)
    try:
        prom.wait("Prometheus ready", lambda: _ready(prom.url, proc), timeout=60)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"prometheus exited with {proc.returncode}")
    try:
        return httpx.get(f"{url}/-/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
