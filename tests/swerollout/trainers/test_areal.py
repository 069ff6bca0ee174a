"""AReaL 1.0.4 adapter against the real AReaL: groups of a real batch on the embedded
default become the [G, L] dicts AReaL's ``check_trajectory_format`` accepts and its
``concat_padded_tensors`` batches; the workflow, a subclass of AReaL's real
``RolloutWorkflow``, runs an episode while AReaL's real SGLang engine pauses the server
for a weight update in the middle."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
from areal.api.workflow_api import RolloutWorkflow
from areal.engine.sglang_remote import RemoteSGLangEngine
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils.data import concat_padded_tensors

from swerollout.client import AsyncRolloutClient, RolloutRecord
from swerollout.trainers._records import LengthCaps, LengthOverflow
from swerollout.trainers.areal import SWERolloutWorkflow, episode_tensors, group_tensors
from tests.swerollout.trainers.conftest import GROUP, SLOW_AGENT, SLOW_SAMPLING, TASKS, Shared, Stack

KEYS = {"input_ids", "loss_mask", "logprobs", "versions", "attention_mask", "rewards"}


def check_group(group: dict[str, Any], records: list[RolloutRecord]) -> None:
    """One row per member: our tokens, our mask, -1 versions off-policy, the reward."""
    assert check_trajectory_format(group, batch_size=len(records), expected_keys=KEYS)
    assert group["input_ids"].dtype == torch.int32 and group["loss_mask"].dtype == torch.int32
    assert group["logprobs"].dtype == torch.float32 and group["versions"].dtype == torch.int32
    assert group["attention_mask"].dtype == torch.bool and group["rewards"].dtype == torch.float32
    assert group["rewards"].shape == (len(records),)
    for row, record in enumerate(records):
        p, n = record.prompt_ids.size, record.prompt_ids.size + record.response_ids.size
        assert group["input_ids"][row, :n].tolist() == record.prompt_ids.tolist() + record.response_ids.tolist()
        assert group["attention_mask"][row].sum().item() == n
        mask = group["loss_mask"][row]
        assert mask[:p].sum().item() == 0 and mask[p:n].tolist() == record.loss_mask.tolist()
        versions = group["versions"][row, :n]
        sampled = mask[:n] == 1
        assert (versions[~sampled] == -1).all(), "tokens the policy did not sample carry version -1"
        assert versions[sampled].tolist() == record.versions_as_int(-1)[record.loss_mask == 1].tolist()
        logprobs = group["logprobs"][row, p:n]
        assert torch.equal(logprobs, torch.from_numpy(record.logprobs))
        assert group["rewards"][row].item() == pytest.approx(record.reward or 0.0)


def test_groups_of_a_real_batch_pass_areals_own_checks(shared: Shared) -> None:
    groups = [[r for r in shared.records if r.sample == s] for s in range(TASKS)]
    tensors = [group_tensors(g) for g in groups]
    for group, records in zip(tensors, groups):
        assert group is not None
        check_group(group, records)
        assert set(group["versions"][group["loss_mask"] == 1].tolist()) == {7}
    batch = concat_padded_tensors([t for t in tensors if t is not None])
    assert batch["input_ids"].shape[0] == TASKS * GROUP
    check_group(batch, [r for g in groups for r in g])


def test_a_group_with_a_member_without_tokens_is_rejected_and_caps_fail_loudly(shared: Shared) -> None:
    record = shared.records[0]
    empty = RolloutRecord(
        name="x-0-1",
        namespace="default",
        batch="x",
        sample=0,
        member=1,
        instance_id=record.instance_id,
        phase=record.phase,
        status=record.status,
    )
    assert group_tensors([record, empty]) is None and check_trajectory_format(None)
    total = record.prompt_ids.size + record.response_ids.size
    with pytest.raises(LengthOverflow, match=r"gconfig\.max_tokens=" + str(total - 1)):
        episode_tensors(record, LengthCaps(total=total - 1, total_setting="gconfig.max_tokens"))


def test_an_episode_rides_a_pause_for_a_weight_update_in_the_middle(stack: Stack, slow_policy: str) -> None:
    shared = stack
    # AReaL's real engine: its version counter and its pause/continue calls to the server.
    engine = RemoteSGLangEngine(InferenceEngineConfig(backend="sglang:d1", pause_grace_period=0.5))
    engine._engine.addresses = [slow_policy.removeprefix("http://").rstrip("/")]
    engine.set_version(1)
    httpx.post(f"{slow_policy}/update_weight_version", json={"new_version": "1"}, timeout=30).raise_for_status()
    gconfig = GenerationHyperparameters(n_samples=GROUP, max_new_tokens=SLOW_SAMPLING["maxNewTokens"], temperature=1.0)
    workflow = SWERolloutWorkflow(
        shared.settings(endpoints=[slow_policy], agent=SLOW_AGENT, batch_prefix="areal", inference={"onAbort": "Keep"}),
        GROUP,
        gconfig=gconfig,
    )
    assert isinstance(workflow, RolloutWorkflow)

    async def episode() -> dict[str, Any] | None:
        async with AsyncRolloutClient.connect(
            shared.stack.paths.kubeconfig, namespace="default", store_url=shared.stack.store_dir.as_uri()
        ) as client:
            task = asyncio.create_task(workflow.arun_episode(engine, shared.instance_row(1)))
            batch = f"areal-{workflow.run_id}-0"
            async with asyncio.timeout(600):
                while not await _generating(client, batch):
                    if task.done():
                        task.result()  # the episode ended before the pause: raise its error
                        raise AssertionError("the episode finished before it could be paused")
                    await asyncio.sleep(0.5)
            # AReaL's weight update: pause the servers, bump the version, continue.
            await asyncio.to_thread(_weight_update, engine, slow_policy)
            result = await asyncio.wait_for(task, timeout=900)
            records = await client.results(batch)
        assert result is not None
        check_group(result, records)
        versions = set(result["versions"][result["loss_mask"] == 1].tolist())
        assert versions == {1, 2}, "tokens sampled before the update carry 1, after it 2"
        return result

    asyncio.run(episode())


async def _generating(client: AsyncRolloutClient, batch: str) -> bool:
    try:
        objects = await client.members(batch)
    except Exception:
        return False
    return len(objects) == GROUP and all(
        int(((o.get("status") or {}).get("progress") or {}).get("generatedTokens", 0)) > 0 for o in objects
    )


def _weight_update(engine: RemoteSGLangEngine, url: str) -> None:
    assert threading.current_thread() is not threading.main_thread()
    engine.pause_generation()
    engine.set_version(2)
    httpx.post(f"{url}/update_weight_version", json={"new_version": "2", "abort_all_requests": False}, timeout=30)
    engine.continue_generation()
