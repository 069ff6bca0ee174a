"""examples/trainer_rollout.py fills trainer samples from simulated rollout completions."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from swerollout.client import AsyncRolloutClient
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import ResultStore
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trainer_rollout.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trainer_rollout_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


async def test_generate_rollout_fills_every_sample(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    example = load_example()
    groups = [
        [example.Sample(index=i * 2 + m, group_index=i, instance=instance(i)) for m in range(2)] for i in range(2)
    ]
    outcomes = {"ex-0-0": "submitted", "ex-0-1": "exit_context", "ex-1-0": "exit_format", "ex-1-1": "submitted"}

    sent = {}

    async def operator() -> None:
        # Play the operator: finish each rollout once it exists, one after another.
        pending = dict(outcomes)
        seed = 0
        while pending:
            for obj in (await akube.list(SWEROLLOUTS, namespace))["items"]:
                name = obj["metadata"]["name"]
                if name in pending:
                    phase = "Failed" if name == "ex-1-0" else "Succeeded"
                    sent[name] = make_trajectory(seed, pending.pop(name))
                    await finish(
                        akube,
                        store,
                        namespace,
                        name,
                        trajectory=sent[name],
                        phase=phase,
                        reward=1.0 if name == "ex-1-1" else 0.0,
                        resolved=name == "ex-1-1",
                    )
                    seed += 1
            await asyncio.sleep(0.1)

    simulated = asyncio.create_task(operator())
    filled = await example.generate_rollout(
        groups, client=client, batch="ex", inference=INFERENCE, weight_version="w1", timeout=60
    )
    await simulated
    assert filled is groups
    by_name = {s.metadata["rollout"]: s for g in groups for s in g}
    assert set(by_name) == set(outcomes)
    for group_index, group in enumerate(groups):
        for member, sample in enumerate(group):
            assert sample.metadata["rollout"] == f"ex-{group_index}-{member}"
            trajectory = sent[sample.metadata["rollout"]]
            assert sample.tokens == trajectory.prompt_ids + trajectory.response_ids
            assert sample.loss_mask == trajectory.loss_mask and sample.weight_versions == trajectory.weight_versions
            assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length > 0
            assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if m == 0)
    assert [s.status for g in groups for s in g] == ["completed", "truncated", "failed", "completed"]
    assert [s.reward for g in groups for s in g] == [0.0, 0.0, 0.0, 1.0]
    stats = example.group_stats(groups)
    assert stats == {
        "samples": 4,
        "mean_reward": 0.25,
        "completed": 2,
        "truncated": 1,
        "failed": 1,
        "response_tokens": sum(s.response_length for g in groups for s in g),
    }
    obj = await akube.get(SWEROLLOUTS, "ex-0-0", namespace)
    assert obj["spec"]["inference"]["weightVersion"] == "w1"
