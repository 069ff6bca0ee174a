"""Each published dataset shape becomes a SWERollout the real API server accepts, with the
right image and eval script (kubectl apply --dry-run=server), and `swerollout submit` takes a
published file with --filter/--limit."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swerollout.api.v1alpha1 import API_VERSION, KIND, SWERolloutSpec
from swerollout.instances import instance_from_row, to_api_instance
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout_dev.controlplane import ControlPlane
from tests.support.published_rows import (
    VERIFIED_SCRIPT,
    swe_gym,
    swe_rebench,
    swe_smith,
    swebench_multimodal,
    swebench_verified,
)

ROOT = Path(__file__).resolve().parents[3]

CASES: dict[str, tuple[Callable[[], dict[str, Any]], str | None, str]] = {
    "verified": (swebench_verified, None, "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"),
    "swe-gym": (swe_gym, "swe-gym", "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5406:latest"),
    "swe-smith": (swe_smith, None, "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"),
    "swe-rebench": (swe_rebench, None, "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3810"),
    "multimodal": (swebench_multimodal, None, "swebench/sweb.eval.x86_64.chartjs_1776_chart.js-10301:latest"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_published_row_is_a_valid_swerollout(case: str, crd: ControlPlane, namespace: str) -> None:
    make_row, dataset, image = CASES[case]
    row = make_row()
    instance = instance_from_row(row, dataset=dataset)
    spec = SWERolloutSpec.model_validate(
        {
            "instance": to_api_instance(instance),
            "inference": {"endpoint": "http://sglang:30000", "tokenizer": "glm-4.5v"},
        }
    )
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"ds-{case}", "namespace": namespace},
        "spec": spec.to_wire(),
    }
    result = crd.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body))
    assert result.returncode == 0, result.stderr
    served = json.loads(result.stdout)["spec"]["instance"]
    assert served["image"] == image
    script = served["evaluation"]["evalScript"]
    assert ">>>>> Start Test Output" in script and ">>>>> End Test Output" in script
    if case == "verified":
        assert script == VERIFIED_SCRIPT and served["evaluation"]["logParser"] == "astropy"
    elif case == "multimodal":
        assert served["issueImages"] == ["https://user-images.example/a.png", "https://user-images.example/b.png"]
        assert served["evaluation"]["logParser"] == "chart_js"
    else:
        assert "-rA" in script and served["evaluation"]["logParser"] == "pytest"
    assert served["evaluation"]["failToPass"] == instance.FAIL_TO_PASS
    # Nothing was created: it was a dry run.
    assert crd.kubectl("get", "swer", f"ds-{case}", "-n", namespace).returncode != 0


async def test_cli_submits_a_published_parquet_with_filter_and_limit(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path
) -> None:
    rows = [swebench_verified(instance_id=f"django__django-{n}") for n in range(12)]
    path = tmp_path / "SWE-bench_Verified-test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    args = [
        sys.executable,
        "-m",
        "swerollout.cli.main",
        "submit",
        "-f",
        str(path),
        "--filter",
        r"django__django-1\d?",
        "--limit",
        "2",
        "--image-template",
        "mirror.local/{id_1776}",
        "--group-size",
        "1",
        "--batch",
        "pub",
        "--endpoint",
        "http://127.0.0.1:9",
        "--tokenizer",
        "qwen-2.5",
        "-n",
        namespace,
    ]
    env = {**os.environ, "KUBECONFIG": str(crd.kubeconfig_path)}
    done = await asyncio.to_thread(subprocess.run, args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 rollouts (2 instances x 1)" in done.stdout
    items = sorted((await akube.list(SWEROLLOUTS, namespace))["items"], key=lambda o: o["metadata"]["name"])
    assert [o["spec"]["instance"]["instanceId"] for o in items] == ["django__django-1", "django__django-10"]
    assert [o["spec"]["instance"]["image"] for o in items] == [
        "mirror.local/django_1776_django-1",
        "mirror.local/django_1776_django-10",
    ]

    bad = await asyncio.to_thread(
        subprocess.run,
        [*args[:5], str(tmp_path / "nope.parquet"), *args[6:]],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "nope.parquet does not exist" in bad.stderr


async def test_cli_refuses_multimodal_images_for_a_text_only_template(
    crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / "SWE-bench_Multimodal-dev.jsonl"
    path.write_text(json.dumps(swebench_multimodal()) + "\n")
    args = [
        sys.executable,
        "-m",
        "swerollout.cli.main",
        "submit",
        "-f",
        str(path),
        "--group-size",
        "1",
        "--batch",
        "mm",
        "--endpoint",
        "http://127.0.0.1:9",
        "--tokenizer",
        "qwen-2.5",
        "-n",
        namespace,
    ]
    env = {**os.environ, "KUBECONFIG": str(crd.kubeconfig_path)}
    refused = await asyncio.to_thread(
        subprocess.run, args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert refused.returncode != 0
    assert "its chat template cannot show images, and spec.instance.issueImages holds 2" in refused.stderr
    assert "spec.agent.issueImageMode: Links" in refused.stderr
    links = await asyncio.to_thread(
        subprocess.run,
        [*args, "--issue-image-mode", "Links"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert links.returncode == 0, links.stderr
    (obj,) = (await akube.list(SWEROLLOUTS, namespace))["items"]
    assert obj["spec"]["agent"]["issueImageMode"] == "Links"
    assert obj["spec"]["instance"]["issueImages"] == [
        "https://user-images.example/a.png",
        "https://user-images.example/b.png",
    ]
