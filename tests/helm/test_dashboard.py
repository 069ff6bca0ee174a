"""The Grafana dashboard's queries, read by Prometheus' own PromQL parser: each parses,
selects only series the operator exports, scoped to the chosen namespace and job, and
rates only counters. (tests/e2e/test_prometheus.py evaluates them against a live batch.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from swerollout_operator.metrics import OperatorMetrics
from tests.support.prometheus import Prometheus, PrometheusError, rated, running_prometheus, selectors

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "swerollout" / "dashboards" / "swerollout.json"
VARIABLES = {"namespace": "swer-ns", "job": "swer-job"}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), []) as prom:
        yield prom


def exported_series() -> tuple[set[str], set[str]]:
    """(every series name the operator's registry can expose, the monotonic ones among them)."""
    names: set[str] = set()
    monotonic: set[str] = set()
    for family in OperatorMetrics().registry.collect():
        if family.type == "counter":
            monotonic.add(family.name + "_total")
        elif family.type == "histogram":
            monotonic |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names | monotonic, monotonic


def queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(f"${name}", value)
    return expr


def test_every_query_parses_selects_exported_series_and_rates_only_counters(prometheus: Prometheus) -> None:
    exported, monotonic = exported_series()
    assert len(queries()) >= 20
    for title, expr in queries():
        tree = prometheus.parse(substitute(expr))
        found = list(selectors(tree))
        assert found, f"{title}: selects nothing: {expr}"
        for selector in found:
            assert selector["name"] in exported, f"{title}: {selector['name']} is not exported by the operator"
            # Two installs scraped by one Prometheus must not be summed together.
            matchers = {(m["name"], m["value"]) for m in selector["matchers"]}
            assert {("namespace", "swer-ns"), ("job", "swer-job")} <= matchers, f"{title}: {expr}"
        for name in rated(tree):
            assert name in monotonic, f"{title}: rate or increase over the gauge {name}"
        # And it evaluates (an empty result: nothing is scraped here).
        assert prometheus.query(substitute(expr)) == [], expr


def test_a_broken_query_is_caught(prometheus: Prometheus) -> None:
    # What the old regular-expression check let through.
    with pytest.raises(PrometheusError, match="parse error"):
        prometheus.parse('sum(rate(swerollout_reconciles_total{job=~"x"}[5m])')
    _, monotonic = exported_series()
    assert list(rated(prometheus.parse("rate(swerollout_work_queue_depth[5m])"))) == ["swerollout_work_queue_depth"]
    assert "swerollout_work_queue_depth" not in monotonic


def test_the_variables_are_what_the_queries_select_by() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= set(variables)
    assert variables["namespace"]["query"]["query"] == "label_values(swerollout_rollouts, namespace)"
    assert variables["job"]["query"]["query"] == 'label_values(swerollout_rollouts{namespace=~"$namespace"}, job)'


def test_metrics_use_base_units_and_no_per_object_labels() -> None:
    registry = OperatorMetrics().registry
    for family in registry.collect():
        assert not re.search(r"_(ms|milliseconds|minutes|hours)(_|$)", family.name), family.name
    # Label sets are small closed sets; nothing identifies a single object.
    exposition = generate_latest(registry).decode()
    label_names = set(re.findall(r"[{,]([a-z_]+)=", exposition))
    assert not label_names & {"name", "rollout", "pod", "uid", "namespace", "instance_id"}, label_names


def test_dashboard_ships_in_the_chart_configmap() -> None:
    template = (DASHBOARD.parents[1] / "templates" / "dashboard.yaml").read_text()
    assert 'Files.Get "dashboards/swerollout.json"' in template
