"""The Grafana dashboard only queries metrics the operator exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest

from swerollout_operator.metrics import OperatorMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "swerollout" / "dashboards" / "swerollout.json"
METRIC = re.compile(r"\b(swerollout_[a-z0-9_]+)")


def exported_series_names() -> set[str]:
    """Every series name the operator's registry can expose (families without samples included)."""
    names: set[str] = set()
    for family in OperatorMetrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series_names()
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 15
    for expr in queries:
        names = METRIC.findall(expr)
        assert names, f"query names no swerollout metric: {expr}"
        for name in names:
            assert name in exported, f"{name} (in {expr!r}) is not exported by the operator"


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


def test_every_query_is_scoped_to_the_chosen_namespace_and_job() -> None:
    # Two installs scraped by one Prometheus must not be summed together.
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= set(variables)
    assert "label_values(swerollout_rollouts, namespace)" in json.dumps(variables["namespace"])
    assert "$namespace" in json.dumps(variables["job"])
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            selectors = re.findall(r"\bswerollout_[a-z0-9_]+(\{[^}]*\})?", expr)
            assert selectors and all('namespace=~"$namespace"' in s and 'job=~"$job"' in s for s in selectors), (
                f"{panel['title']}: {expr}"
            )
