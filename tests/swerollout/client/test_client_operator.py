"""End to end with a real operator process (the chart's ServiceAccount, real API server):
the client submits, the test plays the kubelet and the runner over real HTTP, and the
client collects the trajectory through the operator's /v1/results endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from swerollout.api.v1alpha1 import LABEL_ROLLOUT
from swerollout.client import AsyncRolloutClient, ResultUnavailable, TrainerStatus
from swerollout.kube import PODS, ROLEBINDINGS, ROLES, SWEROLLOUTS, AsyncKubeClient
from swerollout.wire import ingest as wire
from swerollout_dev.controlplane import ControlPlane
from swerollout_operator.tokens import TokenKey, TokenKind
from tests.support.client_support import INFERENCE, instance, make_trajectory
from tests.support.operator import OperatorProcess
from tests.support.operator import operator as operator  # noqa: F401  (the fixture)


async def until(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def grant_reader(kube: AsyncKubeClient, plane: ControlPlane, namespace: str) -> str:
    """A ServiceAccount allowed to get swerollouts in the namespace; returns its token."""
    token = await asyncio.to_thread(plane.mint_token, namespace, "trainer")
    await kube.create(
        ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "trainer"},
            "rules": [
                {"apiGroups": ["swerollout.io"], "resources": ["swerollouts"], "verbs": ["get", "list", "watch"]}
            ],
        },
        namespace,
    )
    await kube.create(
        ROLEBINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "trainer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainer"},
            "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": namespace}],
        },
        namespace,
    )
    return token


async def test_results_through_the_operator_endpoint(
    operator: OperatorProcess, crd: ControlPlane, akube: AsyncKubeClient, namespace: str, tmp_path: Path
) -> None:
    token = await grant_reader(akube, crd, namespace)
    async with AsyncRolloutClient.connect(
        crd.kubeconfig_path, namespace=namespace, results_url=operator.ingest_url, results_token=token
    ) as client:
        await client.submit_batch([instance(0)], 1, batch="op", inference=INFERENCE)
        name = "op-0-0"

        async def pod() -> str | None:
            items = (await akube.list(PODS, namespace, label_selector=f"{LABEL_ROLLOUT}={name}"))["items"]
            return items[0]["metadata"]["name"] if items else None

        pod_name = await until("the rollout pod", pod)
        await akube.patch_status(
            PODS,
            pod_name,
            {
                "status": {
                    "phase": "Running",
                    "podIP": "10.1.2.3",
                    "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                }
            },
            namespace,
        )

        async def phase() -> str:
            return str(((await akube.get(SWEROLLOUTS, name, namespace)).get("status") or {}).get("phase"))

        await until("Running", lambda: _is(phase, "Running"))
        uid = (await akube.get(SWEROLLOUTS, name, namespace))["metadata"]["uid"]
        assert operator.key_file is not None
        ingest_token = TokenKey.from_file(operator.key_file).derive(TokenKind.INGEST, namespace, name, uid)
        base = f"{operator.ingest_url}{wire.API_PREFIX}/{namespace}/{name}/{uid}"
        auth = {"Authorization": f"Bearer {ingest_token}"}
        trajectory = make_trajectory(7, "exit_max_iter_out")
        async with httpx.AsyncClient(timeout=30) as http:
            stored = (await http.put(f"{base}/objects/trajectory", content=trajectory.to_bytes(), headers=auth)).json()
            assignment = (await http.get(f"{base}/assignment", headers=auth)).json()
            event = wire.Finished(
                assignment_id=assignment["id"],
                exit_status="exit_max_iter_out",
                trajectory=wire.StoredObjectRef.model_validate(stored),
            )
            answer = await http.post(f"{base}/events", content=event.model_dump_json(), headers=auth)
            assert answer.status_code == 200, answer.text

        final = await client.wait("op", timeout=60)
        assert final.phases == {"Succeeded": 1}
        [record] = await client.results("op")
        assert record.status is TrainerStatus.COMPLETED and record.exit_status == "exit_max_iter_out"
        assert record.reward == 0.0 and record.graded is False
        assert record.response_ids.tolist() == trajectory.response_ids
        assert record.logprobs.tolist() == trajectory.logprobs

    # The CLI takes the same path, with the token from a file.
    token_file = tmp_path / "token"
    token_file.write_text(token)
    out = tmp_path / "op.jsonl"
    exported = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "swerollout.cli.main",
            "results",
            "--batch",
            "op",
            "--out",
            str(out),
            "-n",
            namespace,
            "--results-url",
            operator.ingest_url,
            "--results-token-file",
            str(token_file),
        ],
        env={**os.environ, "KUBECONFIG": str(crd.kubeconfig_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["response_ids"] == trajectory.response_ids and row["status"] == "completed"

    # A token without the right to read swerollouts gets a clear, non-retryable error.
    nobody = await asyncio.to_thread(crd.mint_token, namespace, "nobody")
    async with AsyncRolloutClient.connect(
        crd.kubeconfig_path, namespace=namespace, results_url=operator.ingest_url, results_token=nobody
    ) as denied:
        with pytest.raises(ResultUnavailable, match="403") as info:
            await denied.results("op")
        assert info.value.retryable is False


async def _is(probe: Any, expected: str) -> bool:
    return bool(await probe() == expected)
