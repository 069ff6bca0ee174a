"""siiRL 0.2.0 adapter against the real siiRL: records of a real batch on the embedded
default become the rollout fields of a batch built by siiRL's own dataloader code
(``collate_fn``, ``preprocess_dataloader``), wrapped in siiRL's ``NodeOutput``, and go
through the next nodes of siiRL's own GRPO pipeline (its ``DAGWorker.compute_reward``
and ``compute_advantage``, bound by ``Node.run`` as siiRL's DAG worker binds them) and
its data buffer (``Dict2Samples``/``Samples2Dict``). The node itself runs a live step
in which one member is aborted and resumed."""

from __future__ import annotations

import asyncio
import json
import pickle
from typing import Any

import pytest
import torch
from siirl.dag_worker.dagworker import DAGWorker
from siirl.dag_worker.data_structures import NodeOutput
from siirl.data_coordinator.dataloader.partitioned_dataset import collate_fn
from siirl.data_coordinator.sample import Dict2Samples, Samples2Dict, preprocess_dataloader
from siirl.execution.dag.builtin_pipelines import grpo_pipeline
from siirl.execution.dag.node import NodeRole
from siirl.execution.dag.task_graph import TaskGraph
from siirl.execution.scheduler.enums import AdvantageEstimator
from siirl.params import SiiRLArguments
from tensordict import TensorDict

from swerollout.client import AsyncRolloutClient, ClientConfigError, RolloutRecord, TrainerStatus
from swerollout.trainers._records import LengthOverflow, NotFinished
from swerollout.trainers.siirl import (
    STATUS_KEY,
    SWERolloutNode,
    caps_from_siirl,
    groups_of,
    node_output,
    rollout_tensors,
    with_swe_rollout,
)
from tests.support.client_support import make_trajectory, record_of
from tests.swerollout.trainers.conftest import GROUP, SLOW_AGENT, SLOW_SAMPLING, TASKS, Shared, Stack

# The first test to run waits for the shared stack and batch (run alone, for the stack to
# come up), and siiRL's imports are slow on a loaded machine: generous.
pytestmark = pytest.mark.timeout(1800)


def siirl_config(prompt_length: int, response_length: int, n: int) -> SiiRLArguments:
    """siiRL's own argument dataclasses, set up for GRPO as its GRPO examples are."""
    config = SiiRLArguments()
    config.algorithm.adv_estimator = AdvantageEstimator.GRPO
    config.actor_rollout_ref.rollout.prompt_length = prompt_length
    config.actor_rollout_ref.rollout.response_length = response_length
    config.actor_rollout_ref.rollout.n = n
    return config


def dag_worker(step: int) -> DAGWorker:
    """siiRL's DAG worker without its Ray and GPU set-up: the fields its reward and
    advantage nodes read (sync rollout mode, one agent), the step and the rank."""
    worker: Any = DAGWorker.__new__(DAGWorker)
    worker.rollout_mode = "sync"
    worker._multi_agent = False
    worker.global_steps = step
    worker._rank = 0
    worker.validate_tokenizer = None
    worker_typed: DAGWorker = worker
    return worker_typed


def siirl_batch(stack: Stack, tasks: list[int], n: int) -> TensorDict:
    """The batch siiRL's dataloader hands the rollout node: dataset rows (a short chat
    prompt, the SWE-bench task in ``extra_info.instance``) collated and repeated n times
    with integer uids."""
    rows = []
    for task in tasks:
        ids = torch.tensor([11, 12, 13, 14])
        rows.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "position_ids": torch.arange(ids.numel()),
                "data_source": "swe-bench",
                "extra_info": {"instance": stack.instance_row(task)},
            }
        )
    batch: TensorDict = preprocess_dataloader(collate_fn(rows), n)
    return batch


def run_node(
    graph: TaskGraph, node_id: str, batch: TensorDict, config: SiiRLArguments, worker: DAGWorker
) -> NodeOutput:
    """One node of the graph with the arguments siiRL's DAG worker passes it."""
    node = graph.get_node(node_id)
    assert node is not None
    kwargs: dict[str, Any] = {
        "_dag_worker_instance": worker,
        "process_group": None,
        "agent_group": {},
        "cur_tp_rank": 0,
    }
    if node.node_role == NodeRole.REWARD:
        kwargs["tp_size"] = 1
    elif node.node_role == NodeRole.ADVANTAGE:
        kwargs["cur_node"] = node
    output = node.run(batch=batch, config=config, **kwargs)
    assert isinstance(output, NodeOutput)
    return output


def downstream(graph: TaskGraph, output: NodeOutput, config: SiiRLArguments, worker: DAGWorker) -> TensorDict:
    """What siiRL's GRPO pipeline runs next on CPU: its reward node, then its advantage node."""
    rewarded = run_node(graph, "function_reward", output.batch, config, worker)
    advantaged = run_node(graph, "calculate_advantages", rewarded.batch, config, worker)
    return advantaged.batch


def check_rows(batch: TensorDict, records: list[RolloutRecord], prompt_length: int, response_length: int) -> None:
    """siiRL's batch holds exactly our tokens and mask, and the reward on the last response token."""
    size = len(records)
    for key, width in (
        ("prompts", prompt_length),
        ("responses", response_length),
        ("response_mask", response_length),
        ("input_ids", prompt_length + response_length),
        ("attention_mask", prompt_length + response_length),
        ("position_ids", prompt_length + response_length),
    ):
        assert batch[key].shape == (size, width) and batch[key].dtype == torch.int64, key
    for key in ("token_level_scores", "token_level_rewards"):
        assert batch[key].shape == (size, response_length) and batch[key].dtype == torch.float32
    for row, record in enumerate(records):
        p, r = record.prompt_ids.size, record.response_ids.size
        assert batch["prompts"][row, prompt_length - p :].tolist() == record.prompt_ids.tolist()
        assert batch["responses"][row, :r].tolist() == record.response_ids.tolist()
        mask = batch["response_mask"][row]
        assert mask[:r].tolist() == record.loss_mask.tolist() and not mask[r:].any()
        attention = batch["attention_mask"][row]
        assert attention[:prompt_length].sum().item() == p and attention[prompt_length:].sum().item() == r
        assert batch["position_ids"][row, attention == 1].tolist() == list(range(p + r))
        scores = batch["token_level_scores"][row]
        assert scores[r - 1].item() == pytest.approx(record.reward or 0.0)
        assert torch.count_nonzero(scores[: r - 1]) == 0 and torch.count_nonzero(scores[r:]) == 0
    assert list(batch[STATUS_KEY]) == [r.status.value for r in records]


def test_records_of_a_real_batch_go_through_siirls_grpo_steps(shared: Shared) -> None:
    records = sorted(shared.records, key=lambda r: (r.sample, r.member))
    prompt_length = max(r.prompt_ids.size for r in records) + 3
    response_length = max(r.response_ids.size for r in records) + 5
    config = siirl_config(prompt_length, response_length, GROUP)
    batch = siirl_batch(shared, list(range(TASKS)), GROUP)
    assert batch["uid"].dtype == torch.int64 and batch["uid"].tolist() == [
        t for t in range(TASKS) for _ in range(GROUP)
    ]
    node = SWERolloutNode(shared.settings(batch_prefix="siirl"))
    graph = with_swe_rollout(grpo_pipeline(), node)
    rollout = graph.get_node("rollout_actor")
    assert rollout is not None and rollout.executable is node and rollout.node_role == NodeRole.ROLLOUT
    assert graph.copy().get_node("rollout_actor").executable is node  # type: ignore[union-attr]

    # What the node returns for these records (the live node is run below).
    output = node_output(batch, records, caps_from_siirl(config), pad_token_id=0)
    assert isinstance(output, NodeOutput)
    assert output.metrics["swerollout/completed"] == 1.0 and output.metrics["swerollout/reward/mean"] == 0.5
    assert output.metrics["swerollout/weight_version/min"] == output.metrics["swerollout/weight_version/max"] == 7
    out = downstream(graph, output, config, dag_worker(7))
    check_rows(out, records, prompt_length, response_length)
    assert torch.equal(out["token_level_rewards"], out["token_level_scores"]), "siiRL's reward node kept our rewards"
    # GRPO over each uid group: the solving member (oracle, reward 1) gains, the other loses,
    # on exactly the tokens the policy sampled.
    advantages = out["advantages"]
    for row, record in enumerate(records):
        sampled = out["response_mask"][row] == 1
        assert not advantages[row, ~sampled].any()
        values = set(advantages[row, sampled].sign().tolist())
        assert values == ({1.0} if record.reward == 1.0 else {-1.0}), (record.name, record.reward)
    # siiRL's data buffer (between ranks of different sizes) keeps the mask and the reward.
    loop = asyncio.new_event_loop()  # siiRL's buffer runs asyncio.get_event_loop().run_until_complete
    try:
        asyncio.set_event_loop(loop)
        buffered = Samples2Dict(Dict2Samples(out))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    for key in ("response_mask", "token_level_scores", "token_level_rewards", "advantages", "responses"):
        assert torch.equal(buffered[key], out[key]), key


def test_status_mapping_and_lengths_fail_loudly() -> None:
    trajectory = make_trajectory(3)
    completed = record_of(trajectory, "Succeeded", 1.0, "x-0-0")
    failed_empty = record_of(None, "Failed", None, "x-0-1")
    failed_with_tokens = record_of(trajectory, "Failed", None, "x-0-2")
    assert [r.status for r in (completed, failed_empty, failed_with_tokens)] == [
        TrainerStatus.COMPLETED,
        TrainerStatus.FAILED,
        TrainerStatus.FAILED,
    ]
    p, r = completed.prompt_ids.size, completed.response_ids.size
    config = siirl_config(p, r, 3)
    out = rollout_tensors([completed, failed_empty, failed_with_tokens], caps_from_siirl(config), pad_token_id=0)
    # A run that failed before sampling: one attended padding token each side, trains nothing.
    assert out["attention_mask"][1].tolist() == [0] * (p - 1) + [1, 1] + [0] * (r - 1)
    assert not out["response_mask"][1].any() and not out["token_level_scores"][1].any()
    # A failed run with tokens keeps them (mask as recorded) at reward 0.
    assert out["response_mask"][2].tolist() == completed.loss_mask.tolist()
    assert not out["token_level_scores"][2].any()
    assert out["token_level_scores"][0, r - 1].item() == pytest.approx(completed.reward or 0.0)
    aborted = record_of(trajectory, "Running", None, "x-0-0")
    with pytest.raises(NotFinished, match="not finished"):
        rollout_tensors([aborted], caps_from_siirl(config), pad_token_id=0)
    with pytest.raises(LengthOverflow, match=r"actor_rollout_ref\.rollout\.response_length=" + str(r - 1)):
        rollout_tensors([completed], caps_from_siirl(siirl_config(p, r - 1, 1)), pad_token_id=0)
    with pytest.raises(LengthOverflow, match=r"actor_rollout_ref\.rollout\.prompt_length=" + str(p - 1)):
        rollout_tensors([completed], caps_from_siirl(siirl_config(p - 1, r, 1)), pad_token_id=0)
    with pytest.raises(ClientConfigError, match="not consecutive"):
        groups_of([0, 1, 0, 1])
    kl = siirl_config(p, r, 1)
    kl.algorithm.use_kl_in_reward = True
    batch = TensorDict({"uid": torch.zeros(1, dtype=torch.int64)}, batch_size=1)
    with pytest.raises(ClientConfigError, match=r"use_kl_in_reward.*use_kl_loss"):
        SWERolloutNode({"endpoints": ["http://10.0.3.7:30000"], "tokenizer": "qwen-3"})(kl, batch)


async def test_the_node_rides_an_abort_and_resume_in_the_middle_of_a_step(stack: Stack, slow_policy: str) -> None:
    config = siirl_config(4096, 4096, GROUP)
    node = SWERolloutNode(
        stack.settings(
            endpoints=[slow_policy], agent=SLOW_AGENT, inference={"sampling": SLOW_SAMPLING}, batch_prefix="siirl"
        ),
        pad_token_id=0,
    )
    worker = dag_worker(1)
    batch_name = node.batch_name(1, 0)
    async with AsyncRolloutClient.connect(
        stack.stack.paths.kubeconfig, namespace="default", store_url=stack.stack.store_dir.as_uri()
    ) as client:
        await asyncio.to_thread(_post, f"{slow_policy}/update_weight_version", {"new_version": "1"})
        step = asyncio.create_task(
            asyncio.to_thread(
                node,
                config,
                siirl_batch(stack, [0], GROUP),
                _dag_worker_instance=worker,
                process_group=None,
                agent_group={},
                cur_tp_rank=0,
            )
        )
        name = await _first_member(client, batch_name, step, lambda o: _turns(o) >= 1)
        assert await client.abort(names=[name]) == [name]
        await _first_member(
            client, batch_name, step, lambda o: o["metadata"]["name"] == name and _phase(o) == "Aborted"
        )
        await asyncio.to_thread(_post, f"{slow_policy}/update_weight_version", {"new_version": "2"})
        assert await client.resume(names=[name], weight_version="2") == [name]
        output = await asyncio.wait_for(step, timeout=900)
        records = await client.results(batch_name)
        objects = await client.members(batch_name)
    assert isinstance(output, NodeOutput)
    assert {o["spec"]["inference"]["weightVersion"] for o in objects if o["metadata"]["name"] != name} == {"1"}
    assert [(r.sample, r.member) for r in records] == [(0, 0), (0, 1)]
    assert all(r.attempts == 1 for r in records), "the aborted member finished on its first pod"
    assert all(r.trainer_labels == {"uid": 0} for r in records)
    check_rows(output.batch, records, 4096, 4096)
    aborted = next(r for r in records if r.name == name)
    versions = set(aborted.versions_as_int(-1)[aborted.loss_mask == 1].tolist())
    assert versions == {1, 2}, "tokens sampled before the abort carry 1, after the resume 2"
    assert output.metrics["swerollout/weight_version/min"] == 1 and output.metrics["swerollout/weight_version/max"] == 2
    out = downstream(with_swe_rollout(grpo_pipeline(), node), output, config, worker)
    assert out["advantages"].shape == (GROUP, 4096) and torch.isfinite(out["advantages"]).all()


def _post(url: str, body: dict[str, Any]) -> None:
    import httpx

    httpx.post(url, json=body, timeout=30).raise_for_status()


def _turns(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("progress") or {}).get("turns", 0))


def _phase(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


async def _first_member(client: AsyncRolloutClient, batch: str, step: Any, probe: Any, timeout: float = 600) -> str:
    """The first member of ``batch`` for which ``probe`` holds (polling the API); the
    node's own error if its step ends first."""
    async with asyncio.timeout(timeout):
        while True:
            if step.done():
                step.result()
                raise AssertionError("the step finished before the probe held")
            for obj in await client.list_rollouts(batch):
                if probe(obj):
                    return str(obj["metadata"]["name"])
            await asyncio.sleep(0.5)


def test_the_pipeline_function_reads_its_settings_from_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swerollout.trainers.siirl import SETTINGS_ENV, swe_grpo_pipeline

    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    with pytest.raises(ClientConfigError, match=SETTINGS_ENV):
        swe_grpo_pipeline()
    path = tmp_path / "swerollout.yaml"
    path.write_text(json.dumps({"endpoints": ["http://10.0.3.7:30000"], "tokenizer": "qwen-3", "batch_prefx": "x"}))
    monkeypatch.setenv(SETTINGS_ENV, str(path))
    with pytest.raises(ClientConfigError, match="batch_prefx"):
        swe_grpo_pipeline()
    path.write_text(json.dumps({"endpoints": ["http://10.0.3.7:30000"], "tokenizer": "qwen-3"}))
    graph = swe_grpo_pipeline()
    assert [n.node_id for n in graph.get_nodes_by_role(NodeRole.ROLLOUT)] == ["rollout_actor"]
    rollout = graph.get_node("rollout_actor")
    assert rollout is not None and isinstance(rollout.executable, SWERolloutNode)
    assert rollout.executable.settings.endpoints == ["http://10.0.3.7:30000"]
    # siiRL ships the graph to its DAG workers.
    shipped = pickle.loads(pickle.dumps(rollout.executable))
    assert shipped.settings == rollout.executable.settings and shipped.run_id == rollout.executable.run_id
    # The rest is siiRL's own GRPO pipeline, unchanged.
    assert sorted(graph.nodes) == sorted(grpo_pipeline().nodes)
