"""verl 0.9.1 adapters against the real verl: records of a real batch on the embedded
default go through verl's own ``AgentLoopWorker._agent_loop_postprocess`` and
``_postprocess`` (as verl's test_agent_loop_extra_fields_schema_on_cpu.py drives them);
the batch-level manager runs a real step; the agent loop, a subclass of verl's real
``AgentLoopBase`` registered in verl's registry, runs a sample that is aborted and
resumed in the middle."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, DictConfigWrap, _agent_loop_registry
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset

from swerollout.client import AsyncRolloutClient, RolloutRecord, TrainerStatus
from swerollout.tokenizers import load_tokenizer
from swerollout.trainers._records import LengthOverflow
from swerollout.trainers.verl import (
    AGENT_NAME,
    SWERolloutAgentLoop,
    SWERolloutAgentLoopManager,
    agent_loop_output,
    caps_from_verl,
    postprocessor,
)
from tests.swerollout.trainers.conftest import GROUP, SLOW_AGENT, SLOW_SAMPLING, TASKS, Shared, Stack

RAW_PROMPT = [{"role": "user", "content": "fix the bug"}]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer("qwen-2.5")


def verl_config(shared: Stack, prompt_length: int, response_length: int, **settings: Any) -> Any:
    """The slice of verl's trainer config the adapters and verl's post-processing read."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
                    "multi_turn": {"tool_config_path": None},
                },
                "model": {},
            },
            "data": {"tool_config_path": None, "apply_chat_template_kwargs": {}},
            "swerollout": json.loads(shared.settings(**settings).model_dump_json()),
        }
    )


def lengths(records: list[RolloutRecord]) -> tuple[int, int]:
    return max(r.prompt_ids.size for r in records), max(r.response_ids.size for r in records)


def check_rows(batch: DataProto, records: list[RolloutRecord]) -> None:
    """verl's batch holds exactly our tokens, mask, logprobs, and the reward on the last response token."""
    prompt_length = batch.batch["prompts"].shape[1]
    for row, record in enumerate(records):
        p, r = record.prompt_ids.size, record.response_ids.size
        assert batch.batch["prompts"][row, prompt_length - p :].tolist() == record.prompt_ids.tolist()
        assert batch.batch["responses"][row, :r].tolist() == record.response_ids.tolist()
        mask = batch.batch["response_mask"][row]
        assert mask[:r].tolist() == record.loss_mask.tolist() and not mask[r:].any()
        logprobs = batch.batch["rollout_log_probs"][row]
        assert torch.equal(logprobs[:r], torch.from_numpy(record.logprobs.astype(np.float32)))
        scores = batch.batch["rm_scores"][row]
        assert scores[r - 1].item() == pytest.approx(record.reward or 0.0)
        assert torch.count_nonzero(scores[: r - 1]) == 0 and torch.count_nonzero(scores[r:]) == 0
        attention = batch.batch["attention_mask"][row]
        assert attention.sum().item() == p + r
        versions = record.versions_as_int(-1)[record.loss_mask == 1]
        assert batch.non_tensor_batch["min_global_steps"][row] == versions.min()
        assert batch.non_tensor_batch["max_global_steps"][row] == versions.max()
        assert batch.non_tensor_batch["swerollout_status"][row] == record.status.value
    assert batch.batch["rollout_log_probs"].dtype == torch.float32
    assert batch.batch["rm_scores"].dtype == torch.float32


async def test_records_of_a_real_batch_pass_verls_own_postprocessing(shared: Shared, tokenizer: Any) -> None:
    records = shared.records
    assert {r.status for r in records} == {TrainerStatus.COMPLETED}
    assert sorted(r.reward for r in records) == [0.0] * TASKS + [1.0] * TASKS
    prompt_length, response_length = lengths(records)
    config = verl_config(shared, prompt_length + 3, response_length + 5)
    caps = caps_from_verl(config.actor_rollout_ref.rollout)
    worker = postprocessor(config, tokenizer)
    padded = [
        await worker._agent_loop_postprocess(
            agent_loop_output(r, caps, pad_token_id=tokenizer.pad_token_id), False, raw_prompt=RAW_PROMPT
        )
        for r in records
    ]
    # Two worker chunks concatenated as verl's manager does.
    chunks = [
        worker._postprocess(padded[i : i + 2], input_non_tensor_batch={"index": objects([i, i + 1])}) for i in (0, 2)
    ]
    batch = DataProto.concat(chunks)
    assert batch.batch["responses"].shape == (TASKS * GROUP, response_length + 5)
    assert batch.batch["input_ids"].shape == (TASKS * GROUP, prompt_length + response_length + 8)
    check_rows(batch, records)
    assert set(batch.non_tensor_batch["min_global_steps"]) == {7}


def test_a_response_longer_than_response_length_fails_naming_it(shared: Shared, tokenizer: Any) -> None:
    record = max(shared.records, key=lambda r: r.response_ids.size)
    config = verl_config(shared, record.prompt_ids.size, record.response_ids.size - 1)
    caps = caps_from_verl(config.actor_rollout_ref.rollout)
    assert caps.max_sampled_tokens == record.response_ids.size - 1
    with pytest.raises(LengthOverflow, match=r"actor_rollout_ref\.rollout\.response_length"):
        agent_loop_output(record, caps, pad_token_id=0)


def test_the_manager_runs_a_step_as_one_batch(shared: Shared, tokenizer: Any) -> None:
    prompt_length, response_length = lengths(shared.records)
    config = verl_config(shared, prompt_length + 64, response_length + 256)
    manager = SWERolloutAgentLoopManager.create(config=config, llm_client=None, tokenizer=tokenizer)
    # verl's repeated batch: rollout.n = 2 consecutive rows per uid.
    prompts = DataProto.from_single_dict(
        {
            "uid": objects(["u-b", "u-b"]),
            "index": objects([5, 5]),
            "raw_prompt": objects([RAW_PROMPT] * 2),
            "extra_info": objects([{"instance": shared.instance_row(1)}] * 2),
        },
        meta_info={"global_steps": 3},
    )
    output = manager.generate_sequences(prompts)
    assert len(output) == 2

    async def records() -> list[RolloutRecord]:
        async with AsyncRolloutClient.connect(
            shared.stack.paths.kubeconfig, namespace="default", store_url=shared.stack.store_dir.as_uri()
        ) as client:
            batch = f"tr-{manager.run_id}-3"
            objects = await client.members(batch)
            assert {o["spec"]["inference"]["weightVersion"] for o in objects} == {"3"}
            assert {o["spec"]["inference"]["maxSampledTokens"] for o in objects} == {response_length + 256}
            return await client.results(batch)

    got = asyncio.run(records())
    assert [(r.sample, r.member) for r in got] == [(0, 0), (0, 1)]
    assert {r.instance_id for r in got} == {shared.stack.instances[1].instance_id}
    check_rows(output, got)
    assert list(output.non_tensor_batch["uid"]) == ["u-b", "u-b"]
    assert set(output.non_tensor_batch["min_global_steps"]) == {3}


async def test_the_agent_loop_rides_an_abort_and_resume_in_the_middle(
    stack: Stack, slow_policy: str, tokenizer: Any
) -> None:
    shared = stack
    config = verl_config(
        shared,
        4096,
        4096,
        endpoints=[slow_policy],
        agent=SLOW_AGENT,
        inference={"sampling": SLOW_SAMPLING},
    )
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "swerollout.trainers.verl.SWERolloutAgentLoop"}
    loop = SWERolloutAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=None,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )
    assert isinstance(loop, AgentLoopBase)
    async with AsyncRolloutClient.connect(
        shared.stack.paths.kubeconfig, namespace="default", store_url=shared.stack.store_dir.as_uri()
    ) as client:
        httpx_post(f"{slow_policy}/update_weight_version", {"new_version": "1"})
        run = asyncio.create_task(
            loop.run(
                {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                raw_prompt=RAW_PROMPT,
                uid="u-slow",
                index=9,
                extra_info={"instance": shared.instance_row(0)},
            )
        )
        name = await wait_for(client, lambda o: trainer_uid(o) == "u-slow" and turns(o) >= 1)
        assert await client.abort(names=[name]) == [name]
        await wait_for(client, lambda o: o["metadata"]["name"] == name and phase(o) == "Aborted")
        httpx_post(f"{slow_policy}/update_weight_version", {"new_version": "2"})
        assert await client.resume(names=[name], weight_version="2") == [name]
        output = await asyncio.wait_for(run, timeout=900)
        record = await client.result(name)
    assert record.trainer_labels == {"uid": "u-slow", "index": 9}
    assert record.attempts == 1
    assert output.response_mask == record.loss_mask.tolist()
    assert output.response_ids == record.response_ids.tolist()
    assert output.extra_fields["min_global_steps"] == 1 and output.extra_fields["max_global_steps"] == 2
    assert output.reward_score == (record.reward or 0.0)


def objects(values: list[Any]) -> np.ndarray[Any, np.dtype[np.object_]]:
    """A 1-D object column, as verl's non-tensor batch holds one (lists stay whole)."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def httpx_post(url: str, body: dict[str, Any]) -> None:
    import httpx

    httpx.post(url, json=body, timeout=30).raise_for_status()


def trainer_uid(obj: dict[str, Any]) -> str | None:
    raw = (obj["metadata"].get("annotations") or {}).get("swerollout.io/trainer-labels")
    return json.loads(raw).get("uid") if raw else None


def turns(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("progress") or {}).get("turns", 0))


def phase(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


async def wait_for(client: AsyncRolloutClient, probe: Any, timeout: float = 600) -> str:
    """The name of the first rollout of the namespace for which ``probe`` holds (polling the API)."""
    async with asyncio.timeout(timeout):
        while True:
            for obj in await client.list_rollouts():
                if probe(obj):
                    return str(obj["metadata"]["name"])
            await asyncio.sleep(0.5)
