"""The chart's alerts: the PrometheusRule rendered from the chart passes `promtool check
rules`, and `promtool test rules` runs every alert's cases (tests/helm/alerts_test.yaml)
against it: series that fire each alert and series that do not."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from swerollout_dev.binaries import find_binaries
from tests.support.prometheus import prometheus_binaries

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "swerollout"
TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOKS = ROOT / "docs" / "runbooks.md"
# The release the test series are labelled for: job = the chart's Service, namespace = the release's.
RELEASE, NAMESPACE = "swerollout", "swerollout-system"
RUNBOOK_URL = "https://docs.example/runbooks.md"


def rendered_rules(*values: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(find_binaries().helm),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            f"metrics.prometheusRule.runbookUrl={RUNBOOK_URL}",
            *values,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PrometheusRule"]


def write_rules_file(tmp_path: Path) -> Path:
    (rule,) = rendered_rules()
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return rules


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(prometheus_binaries().promtool), *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def alert_names(groups: list[dict[str, Any]]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"] if "alert" in r}


def test_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    rules = write_rules_file(tmp_path)
    result = promtool("check", "rules", str(rules), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout, result.stdout


def test_every_alert_fires_and_holds_in_promtool_test_rules(tmp_path: Path) -> None:
    rules = write_rules_file(tmp_path)
    cases = TESTS.read_text().replace("RENDERED_RULES", str(rules)).replace("RUNBOOK#", RUNBOOK_URL + "#")
    (tmp_path / "alerts_test.yaml").write_text(cases)
    result = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout

    # Each alert has a case where it fires and one where it does not.
    tests = yaml.safe_load(cases)["tests"]
    checks = [c for t in tests for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in checks if c["exp_alerts"]}
    held = {c["alertname"] for c in checks if not c["exp_alerts"]}
    every = alert_names(yaml.safe_load(rules.read_text())["groups"])
    assert fired == every, every - fired
    assert held == every, every - held


def test_a_broken_rule_fails_the_unit_tests(tmp_path: Path) -> None:
    # The cases would catch a threshold that no longer fires (promtool reports the alert missing).
    rules = write_rules_file(tmp_path)
    rules.write_text(rules.read_text().replace("> 0.05", "> 0.5"))
    cases = TESTS.read_text().replace("RENDERED_RULES", str(rules)).replace("RUNBOOK#", RUNBOOK_URL + "#")
    (tmp_path / "alerts_test.yaml").write_text(cases)
    result = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "SWERolloutIngestErrors" in result.stdout + result.stderr


def test_each_alert_links_its_runbook_section() -> None:
    (rule,) = rendered_rules()
    sections = {line[3:].strip().lower() for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            url = r["annotations"]["runbook_url"]
            assert url == f"{RUNBOOK_URL}#{r['alert'].lower()}", url
            assert r["alert"].lower() in sections, f"docs/runbooks.md has no section for {r['alert']}"
            assert r["labels"]["severity"] in {"warning", "critical"}


def test_thresholds_and_labels_come_from_values() -> None:
    (rule,) = rendered_rules(
        "--set",
        "metrics.prometheusRule.abortFanoutSeconds=7",
        "--set",
        "metrics.prometheusRule.stuckPhaseSeconds.Running=99",
        "--set",
        "metrics.prometheusRule.additionalAlertLabels.team=rl",
        "--set",
        "metrics.prometheusRule.labels.release=kps",
    )
    assert rule["metadata"]["labels"]["release"] == "kps"
    by_name = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert by_name["SWERolloutAbortFanoutSlow"]["expr"].rstrip().endswith("> 7")
    assert 'phase="Running"}) > 99' in by_name["SWERolloutStuckInPhase"]["expr"]
    assert all(r["labels"]["team"] == "rl" for r in by_name.values())
    assert not rendered_rules("--set", "metrics.prometheusRule.enabled=false")
