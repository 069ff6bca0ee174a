"""Chart naming and labels as Helm users expect: nameOverride/fullnameOverride, the common
labels on the pod template, a helm.sh/chart label that is valid for any chart version, and
the GitOps path for the token key (a Secret of your own, none rendered)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from swerollout_dev.binaries import find_binaries

CHART = Path(__file__).resolve().parents[2] / "helm" / "swerollout"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def render(chart: Path, *values: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(find_binaries().helm), "template", "rel", str(chart), "--namespace", "swer-system", *values],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment")


def test_name_overrides() -> None:
    docs = render(CHART, "--set", "fullnameOverride=swr")
    assert deployment(docs)["metadata"]["name"] == "swr"
    assert {d["metadata"]["name"] for d in docs if d["kind"] in ("ServiceAccount", "Service")} == {"swr"}
    docs = render(CHART, "--set", "nameOverride=rollouts")
    dep = deployment(docs)
    assert dep["metadata"]["name"] == "rel-rollouts"
    assert dep["metadata"]["labels"]["app.kubernetes.io/name"] == "rollouts"
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "rollouts"


def test_pod_template_has_the_common_labels() -> None:
    dep = deployment(render(CHART))
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    for key in (
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
        "app.kubernetes.io/instance",
    ):
        assert pod_labels[key] == dep["metadata"]["labels"][key]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_chart_label_is_valid_for_any_version(tmp_path: Path) -> None:
    chart = tmp_path / "swerollout"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.1.0-rc.1+build.20261201." + "9" * 60
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    for doc in render(chart):
        value = doc["metadata"].get("labels", {}).get("helm.sh/chart")
        if value is not None:
            assert len(value) <= 63 and LABEL_VALUE.match(value), value
            assert "+" not in value


def test_own_token_key_secret_renders_none() -> None:
    docs = render(CHART, "--set", "operator.tokenKeySecret=my-key")
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert "my-key" in yaml.safe_dump(deployment(docs))
