"""A trainer-style rollout function on top of swerollout.client.

RL frameworks with custom rollout hooks (slime's ``--rollout-function-path``, verl's
agent-loop / rollout workers) hand the hook a batch of prompts grouped for GRPO and
expect the same samples back with tokens, loss mask, logprobs and reward filled in.
Here a prompt is a SWE-bench instance and one "generation" is a whole agentic
rollout run by the swerollout operator:

    groups = [[Sample(index=i * G + m, group_index=i, instance=inst) for m in range(G)]
              for i, inst in enumerate(instances)]
    groups = asyncio.run(generate_rollout(groups, client=client, batch="step-0042",
                                          inference={"endpoint": URL, "tokenizer": "qwen-2.5"}))

Samples arrive as rollouts finish (``stream_results``), so the trainer could start
on complete groups early; this function simply returns once all are in. Before a
weight update call ``client.abort(batch)``; afterwards ``client.resume(batch)``: the
rollouts continue on their live sandboxes and each token records its weight version.

Run against a cluster (the operator and an SGLang server must be running):

    python examples/trainer_rollout.py --instances instances.jsonl --group-size 4 \\
        --batch demo-1 --endpoint http://127.0.0.1:30000 --tokenizer qwen-2.5 \\
        --store-url file:///path/to/results
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swerollout.client import AsyncRolloutClient, RolloutRecord, TrainerStatus
from swerollout.instances import SWEBenchInstance, load_instances


@dataclass
class Sample:
    """The fields slime's ``Sample`` (and verl's DataProto rows) carry for one response."""

    index: int
    group_index: int
    instance: SWEBenchInstance | dict[str, Any]
    """The prompt: a SWE-bench instance."""
    tokens: list[int] = field(default_factory=list)
    """Prompt followed by response tokens."""
    response_length: int = 0
    loss_mask: list[int] = field(default_factory=list)
    """Per response token: 1 where the policy sampled it."""
    rollout_log_probs: list[float] = field(default_factory=list)
    weight_versions: list[str | None] = field(default_factory=list)
    reward: float | None = None
    status: str = "pending"
    """pending | completed | truncated | aborted | failed."""
    metadata: dict[str, Any] = field(default_factory=dict)


def fill(sample: Sample, record: RolloutRecord) -> Sample:
    """Copy one finished rollout into its sample (failed rollouts keep reward 0 so GRPO groups stay whole)."""
    sample.tokens = record.prompt_ids.tolist() + record.response_ids.tolist()
    sample.response_length = int(record.response_ids.size)
    sample.loss_mask = record.loss_mask.tolist()
    sample.rollout_log_probs = record.logprobs.tolist()
    sample.weight_versions = record.weight_versions.tolist()
    sample.reward = record.reward if record.reward is not None else 0.0
    sample.status = record.status.value
    sample.metadata.update(
        rollout=record.name, exit_status=record.exit_status, resolved=record.resolved, turns=record.turns
    )
    return sample


async def generate_rollout(
    groups: list[list[Sample]],
    *,
    client: AsyncRolloutClient,
    batch: str,
    inference: dict[str, Any],
    mode: str = "train",
    weight_version: str | None = None,
    timeout: float | None = None,
) -> list[list[Sample]]:
    """Run every sample of ``groups`` as a SWERollout and fill it in; returns ``groups``."""
    if not groups or len({len(g) for g in groups}) != 1:
        raise ValueError("groups must be a non-empty list of equally sized groups")
    await client.submit_batch(
        [group[0].instance for group in groups],
        len(groups[0]),
        batch=batch,
        inference=inference,
        mode=mode,
        weight_version=weight_version,
    )

    async def collect() -> None:
        async for record in client.stream_results(batch):
            fill(groups[record.sample][record.member], record)

    await asyncio.wait_for(collect(), timeout)
    return groups


def group_stats(groups: list[list[Sample]]) -> dict[str, float]:
    samples = [s for g in groups for s in g]
    rewards = [s.reward or 0.0 for s in samples]
    return {
        "samples": len(samples),
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "completed": sum(s.status == TrainerStatus.COMPLETED for s in samples),
        "truncated": sum(s.status == TrainerStatus.TRUNCATED for s in samples),
        "failed": sum(s.status == TrainerStatus.FAILED for s in samples),
        "response_tokens": sum(s.response_length for s in samples),
    }


async def _main(args: argparse.Namespace) -> None:
    instances = load_instances(Path(args.instances))
    groups = [
        [Sample(index=i * args.group_size + m, group_index=i, instance=inst) for m in range(args.group_size)]
        for i, inst in enumerate(instances)
    ]
    async with AsyncRolloutClient.connect(
        args.kubeconfig, namespace=args.namespace, store_url=args.store_url
    ) as client:
        await generate_rollout(
            groups,
            client=client,
            batch=args.batch,
            inference={"endpoint": args.endpoint, "tokenizer": args.tokenizer},
            timeout=args.timeout,
        )
    print(group_stats(groups))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", required=True)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--tokenizer", default="qwen-2.5")
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace")
    parser.add_argument("--timeout", type=float)
    asyncio.run(_main(parser.parse_args()))
