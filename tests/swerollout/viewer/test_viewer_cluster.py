"""`swerollout view --batch NAME`: a batch read from the API server and the result store
through the client (real kube-apiserver), written as the one-file report."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import open_store
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances
from tests.support.client_support import finish
from tests.support.cluster import install_crd

DATA = re.compile(r'<script type="application/json" id="swerollout-data">(.*?)</script>', re.S)


def _trajectory(record: Any) -> Trajectory:
    return Trajectory(
        prompt_ids=record.prompt_ids.tolist(),
        response_ids=record.response_ids.tolist(),
        loss_mask=record.loss_mask.tolist(),
        logprobs=record.logprobs.tolist(),
        weight_versions=record.weight_versions.tolist(),
        messages=record.messages,
        exit_status=record.exit_status,
        submission=record.submission,
        turns=record.turns,
        info=record.info,
    )


async def test_view_batch_from_the_cluster(
    control_plane: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path, demo_batch: Any
) -> None:
    await asyncio.to_thread(install_crd, control_plane)
    instances = tmp_path / "instances.jsonl"
    instances.write_text(
        "".join(line + "\n" for line in (DEFAULT_TASKS_DIR / "instances.jsonl").read_text().splitlines()[:1])
    )
    assert len(load_instances(instances)) == 1
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "swerollout.cli.main", *args], env=env, capture_output=True, text=True, timeout=300
        )

    submitted = await asyncio.to_thread(
        cli,
        "submit",
        "-f",
        str(instances),
        "--group-size",
        "2",
        "--batch",
        "vb",
        "--endpoint",
        "http://127.0.0.1:9",
        "--tokenizer",
        "qwen-2.5",
        "-n",
        namespace,
    )
    assert submitted.returncode == 0, submitted.stderr
    names = sorted(o["metadata"]["name"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"])
    sources = [r for r in demo_batch.records if r.sample == 1]  # the group with the aborted-and-resumed member
    store_url = (tmp_path / "store").as_uri()
    store = open_store(store_url)
    try:
        for name, record in zip(names, sources):
            await finish(
                akube,
                store,
                namespace,
                name,
                trajectory=_trajectory(record),
                reward=record.reward or 0.0,
                resolved=bool(record.resolved),
                report=record.report,
            )
    finally:
        await store.aclose()

    out = tmp_path / "vb.html"
    viewed = await asyncio.to_thread(
        cli, "view", "--batch", "vb", "--out", str(out), "--store-url", store_url, "-n", namespace
    )
    assert viewed.returncode == 0, viewed.stderr
    match = DATA.search(out.read_text())
    assert match
    data = json.loads(match.group(1))
    assert data["batch"]["total"] == 2 and data["batch"]["resumed"] == 1 and data["batch"]["resolved"] == 1
    for name, record in zip(names, sources):
        view = data["rollouts"][name]["token_view"]
        assert view["ids"] == record.prompt_ids.tolist() + record.response_ids.tolist()
        assert len(view["pieces"]) == len(view["ids"])
        assert data["rollouts"][name]["report"] == record.report
    aborted = data["rollouts"][names[0]]["token_view"]["marks"]
    assert sorted(m["kind"] for m in aborted) == ["abort", "resume", "version"]

    missing = await asyncio.to_thread(
        cli, "view", "--batch", "nope", "--out", str(out), "--store-url", store_url, "-n", namespace
    )
    assert missing.returncode == 2 and "nope" in missing.stderr
