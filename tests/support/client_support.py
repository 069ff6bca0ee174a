"""Helpers that play the operator's part: write status and trajectory blobs the way it does."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

from swerollout.client.records import RolloutRecord, build_record
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import Owner, ResultStore
from swerollout.wire.trajectory import Trajectory

INFERENCE: dict[str, Any] = {"endpoint": "http://127.0.0.1:9/", "tokenizer": "qwen-2.5"}


def instance(i: int) -> dict[str, Any]:
    """A small but valid spec.instance (API field names)."""
    return {
        "instanceId": f"demo__lib-{i}",
        "repo": "demo/lib",
        "baseCommit": f"{i:07x}abcdef",
        "image": "file:///tmp/demo",
        "problemStatement": f"bug number {i}",
        "evaluation": {"failToPass": [f"tests/test_bug.py::test_{i}"]},
    }


def make_trajectory(seed: int, exit_status: str = "submitted") -> Trajectory:
    """A trajectory whose numbers depend on ``seed`` (logprobs exact in float32)."""
    rng = random.Random(seed)
    prompt = [rng.randrange(0, 150_000) for _ in range(rng.randrange(5, 30))]
    n = rng.randrange(10, 60)
    mask = [rng.randrange(0, 2) for _ in range(n)]
    return Trajectory(
        run_uid=f"uid-{seed}",
        prompt_ids=prompt,
        response_ids=[rng.randrange(0, 150_000) for _ in range(n)],
        loss_mask=mask,
        logprobs=[-rng.randrange(1, 64) / 16 if m else 0.0 for m in mask],
        weight_versions=[(f"v{rng.randrange(1, 3)}" if m else None) for m in mask],
        messages=[{"role": "user", "content": f"task {seed}"}],
        exit_status=exit_status,
        submission="diff --git a/x b/x\n" if exit_status.startswith("submitted") else "",
        turns=3,
    )


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def set_status(kube: AsyncKubeClient, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    return await kube.patch_status(SWEROLLOUTS, name, {"status": status}, namespace)


async def run(kube: AsyncKubeClient, namespace: str, name: str, *, generated: int = 10) -> None:
    await set_status(
        kube,
        namespace,
        name,
        {"phase": "Running", "progress": {"turns": 1, "tokens": generated + 20, "generatedTokens": generated}},
    )


async def finish(
    kube: AsyncKubeClient,
    store: ResultStore,
    namespace: str,
    name: str,
    *,
    trajectory: Trajectory,
    phase: str = "Succeeded",
    reward: float = 1.0,
    resolved: bool = True,
    graded: bool = True,
    report: dict[str, Any] | None = None,
) -> None:
    """Store the trajectory (and the eval report, if given) under the rollout's uid and
    publish the final status."""
    obj = await kube.get(SWEROLLOUTS, name, namespace)
    owner = Owner(namespace=namespace, uid=obj["metadata"]["uid"])
    stored = await store.put(owner, "trajectory", trajectory.to_bytes())
    reward_status: dict[str, Any] = {"value": reward, "resolved": resolved, "graded": graded}
    if report is not None:
        saved = await store.put(owner, "report", json.dumps(report).encode())
        reward_status["report"] = {"ref": saved.ref, "sha256": saved.sha256, "bytes": saved.bytes}
    await set_status(
        kube,
        namespace,
        name,
        {
            "phase": phase,
            "result": {
                "exitStatus": trajectory.exit_status or "exit_error",
                "turns": trajectory.turns,
                "promptTokens": len(trajectory.prompt_ids),
                "responseTokens": len(trajectory.response_ids),
                "truncated": (trajectory.exit_status or "").startswith("exit_context"),
                "trajectory": {"ref": stored.ref, "sha256": stored.sha256, "bytes": stored.bytes},
            },
            "reward": reward_status,
            "completionTime": now(),
        },
    )


def record_of(
    trajectory: Trajectory | None, phase: str = "Succeeded", reward: float | None = 1.0, name: str = "b-0-1"
) -> RolloutRecord:
    """A record as the client builds it from an API object and its trajectory."""
    status: dict[str, Any] = {"phase": phase}
    if trajectory is not None:
        status["result"] = {
            "exitStatus": trajectory.exit_status,
            "turns": trajectory.turns,
            "promptTokens": len(trajectory.prompt_ids),
            "responseTokens": len(trajectory.response_ids),
        }
    if reward is not None:
        status["reward"] = {"value": reward, "resolved": reward > 0, "graded": True}
    return build_record({"metadata": {"name": name, "namespace": "ns", "labels": {}}, "status": status}, trajectory)
