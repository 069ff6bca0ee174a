"""siiRL 0.2.0: SWE rollouts as the rollout node of a siiRL DAG pipeline.

siiRL's one extension point is the pipeline: ``dag.custom_pipeline_fn`` names a function
that returns a ``TaskGraph``, and every node is ``fn(config, batch, **kw) -> NodeOutput``.
:func:`with_swe_rollout` takes a graph built by siiRL's own pipeline function (e.g.
``grpo_pipeline()``) and makes :class:`SWERolloutNode` its rollout node; siiRL's reward,
advantage, log-prob and training nodes stay as they are. docs/trainers-siirl.md has the
config lines.

Per step and DAG worker (data-parallel rank), the node submits ONE batch: the rank's
distinct ``uid`` groups as tasks, ``actor_rollout_ref.rollout.n`` members each (batch
``<prefix>-<run id>-<step>-r<rank>``, weight version = the step), waits for it, and
returns the rows in the order siiRL handed them in, laid out as siiRL's own agent loop
lays them out (prompts left-padded to ``rollout.prompt_length``, responses right-padded
to ``rollout.response_length``), on the shared rule of :mod:`swerollout.trainers._records`:

- ``response_mask`` is our loss mask (1 = sampled by the policy), never re-derived;
- the reward goes on the last response token of ``token_level_scores``, where siiRL's
  reward managers put a sequence reward, and the same tensor on ``token_level_rewards``:
  siiRL's reward node then sees a graded batch and passes it on (a reward function over
  decoded text means nothing for a SWE task), so ``algorithm.use_kl_in_reward`` is
  refused (use the actor's KL loss);
- rollout logprobs are NOT handed over: siiRL's data-buffer ``Sample`` has no field for
  them, so its actor recomputes the old log-probs (``actor_old_log_prob``) as it does for
  its own rollouts.

siiRL pads to fixed shapes and its data buffer stacks rows across ranks, so a longer
record cannot be kept whole: the caps are mapped onto the spec (``maxSampledTokens``,
``maxContextTokens``) and every record is checked; an overflow raises ``LengthOverflow``
naming the setting to raise. A run that failed before sampling anything stays in its
group as one padding token of prompt and response (mask 0, reward 0): it trains nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import yaml
from siirl.dag_worker.data_structures import NodeOutput
from siirl.execution.dag.node import NodeRole
from siirl.execution.dag.task_graph import TaskGraph
from tensordict import TensorDict
from tensordict.tensorclass import NonTensorData

from swerollout.client import ClientConfigError, RolloutRecord, TrainerStatus
from swerollout.trainers._records import LengthCaps, has_tokens, reward_of, sampling_from, token_arrays
from swerollout.trainers._settings import AdapterSettings, instance_from_row

SETTINGS_ENV = "SWEROLLOUT_SIIRL_SETTINGS"
"""The YAML (or JSON) file with the adapter settings that :func:`swe_grpo_pipeline` reads."""
STATUS_KEY = "swerollout_status"
"""The non-tensor column with each row's trainer status (completed/truncated/failed)."""

_T = TypeVar("_T")


def caps_from_siirl(config: Any) -> LengthCaps:
    """siiRL pads prompts to ``actor_rollout_ref.rollout.prompt_length`` and responses to
    ``rollout.response_length`` (its agent loop does; the data config's lengths stand in
    when those are unset)."""
    rollout, data = config.actor_rollout_ref.rollout, config.data
    prompt_setting, response_setting = (
        "actor_rollout_ref.rollout.prompt_length",
        "actor_rollout_ref.rollout.response_length",
    )
    prompt, response = rollout.prompt_length, rollout.response_length
    if prompt is None:
        prompt, prompt_setting = data.max_prompt_length, "data.max_prompt_length"
    if response is None:
        response, response_setting = data.max_response_length, "data.max_response_length"
    return LengthCaps(
        prompt=int(prompt),
        response=int(response),
        prompt_setting=prompt_setting,
        response_setting=response_setting,
    )


def groups_of(uids: Sequence[int]) -> tuple[list[int], int]:
    """The distinct uids in order and the group size; ClientConfigError unless every
    group has the same size and its rows are consecutive (siiRL repeats each prompt
    ``rollout.n`` times in place)."""
    order = list(dict.fromkeys(uids))
    rows = {u: [i for i, v in enumerate(uids) if v == u] for u in order}
    sizes = {len(r) for r in rows.values()}
    if len(sizes) != 1:
        raise ClientConfigError(f"every uid needs the same number of rows (rollout.n); got group sizes {sorted(sizes)}")
    size = sizes.pop()
    for u, idx in rows.items():
        if idx != list(range(idx[0], idx[0] + size)):
            raise ClientConfigError(f"the rows of uid {u} are not consecutive; siiRL repeats each prompt in place")
    return order, size


def rollout_tensors(records: Sequence[RolloutRecord], caps: LengthCaps, *, pad_token_id: int) -> TensorDict:
    """Finished records (in row order) as the rollout fields of a siiRL batch.

    ``prompts`` ``[B, P]`` left-padded, ``responses``/``response_mask`` ``[B, R]``
    right-padded, ``input_ids``/``attention_mask``/``position_ids`` ``[B, P + R]``
    (int64, positions as siiRL's agent loop counts them), ``token_level_scores`` and
    ``token_level_rewards`` ``[B, R]`` float32 with the reward on the last response token.
    """
    if caps.prompt is None or caps.response is None:
        raise ValueError("siiRL pads to fixed shapes: both caps are needed")
    size, p_len, r_len = len(records), caps.prompt, caps.response
    prompts = torch.full((size, p_len), pad_token_id, dtype=torch.int64)
    responses = torch.full((size, r_len), pad_token_id, dtype=torch.int64)
    prompt_attention = torch.zeros((size, p_len), dtype=torch.int64)
    response_attention = torch.zeros((size, r_len), dtype=torch.int64)
    response_mask = torch.zeros((size, r_len), dtype=torch.int64)
    scores = torch.zeros((size, r_len), dtype=torch.float32)
    for row, record in enumerate(records):
        if not has_tokens(record):
            # siiRL cannot drop a row from a step: one padding token each side, attended
            # (an all-masked row has no position to attend to), never trained.
            prompt_attention[row, -1] = 1
            response_attention[row, 0] = 1
            scores[row, 0] = reward_of(record)
            continue
        arrays = token_arrays(record, caps)
        p, r = arrays.prompt_ids.size, arrays.response_ids.size
        prompts[row, p_len - p :] = torch.from_numpy(arrays.prompt_ids)
        prompt_attention[row, p_len - p :] = 1
        responses[row, :r] = torch.from_numpy(arrays.response_ids)
        response_attention[row, :r] = 1
        response_mask[row, :r] = torch.from_numpy(arrays.loss_mask)
        scores[row, max(r, 1) - 1] = arrays.reward
    attention_mask = torch.cat([prompt_attention, response_attention], dim=1)
    return TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1) * attention_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
        },
        batch_size=size,
    )


def rollout_metrics(records: Sequence[RolloutRecord]) -> dict[str, float]:
    """What siiRL's metric worker logs for the step (means over the rank's rows)."""
    count = max(len(records), 1)
    metrics = {f"swerollout/{s.value}": sum(r.status is s for r in records) / count for s in TrainerStatus}
    metrics["swerollout/reward/mean"] = sum(reward_of(r) for r in records) / count
    metrics["swerollout/sampled_tokens/mean"] = sum(r.sampled_tokens for r in records) / count
    metrics["swerollout/turns/mean"] = sum(r.turns for r in records) / count
    versions = np.concatenate([r.versions_as_int(-1)[r.loss_mask == 1] for r in records] or [np.zeros(0, np.int64)])
    if versions.size:
        metrics["swerollout/weight_version/min"] = float(versions.min())
        metrics["swerollout/weight_version/max"] = float(versions.max())
    return metrics


def node_output(
    batch: TensorDict, records: Sequence[RolloutRecord], caps: LengthCaps, *, pad_token_id: int
) -> NodeOutput:
    """siiRL's input ``batch`` (rows in order) completed with the records' rollout fields
    (:func:`rollout_tensors`, replacing the dataset's prompt-only ``input_ids``, masks and
    positions, as siiRL's own rollout does) and their statuses (:data:`STATUS_KEY`)."""
    batch.update(rollout_tensors(records, caps, pad_token_id=pad_token_id))
    statuses = np.array([r.status.value for r in records], dtype=object)
    batch[STATUS_KEY] = NonTensorData(statuses, batch_size=batch.batch_size)
    return NodeOutput(batch=batch, metrics=rollout_metrics(records))


def _rows(batch: TensorDict) -> list[dict[str, Any]]:
    """The non-tensor columns of each row (what siiRL's dataloader keeps of a dataset row)."""
    size = int(batch.batch_size[0])
    columns: dict[str, Any] = {}
    for key in batch.keys():
        value = batch[key]  # a non-tensor column comes back as its array (``get`` would wrap it)
        if isinstance(value, np.ndarray) and value.shape[:1] == (size,):
            columns[str(key)] = value
        elif isinstance(value, list) and len(value) == size:
            columns[str(key)] = value
    return [{k: v[i] for k, v in columns.items()} for i in range(size)]


def _blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end from siiRL's synchronous node call (in a thread of its own
    when the caller already runs an event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class SWERolloutNode:
    """siiRL's rollout node: ``node(config, batch, **kw) -> NodeOutput``.

    Picklable (siiRL ships its task graph to the DAG workers). ``pad_token_id``: the
    policy tokenizer's, else taken from the DAG worker's tokenizer, else 0 (padding is
    never attended)."""

    def __init__(
        self,
        settings: AdapterSettings | Mapping[str, Any],
        *,
        run_id: str | None = None,
        pad_token_id: int | None = None,
    ) -> None:
        self.settings = (
            settings
            if isinstance(settings, AdapterSettings)
            else AdapterSettings.parse(settings, "the node's settings")
        )
        self.run_id = run_id or secrets.token_hex(3)
        """Keeps this run's batch names apart from an earlier run's with the same steps."""
        self.pad_token_id = pad_token_id
        self._calls = 0
        """Steps counted by the node itself, when no DAG worker tells it ``global_steps``."""

    def __call__(self, config: Any, batch: TensorDict, **kwargs: Any) -> NodeOutput:
        if bool(config.algorithm.use_kl_in_reward):
            raise ClientConfigError(
                "algorithm.use_kl_in_reward=True: the SWE rollouts come back graded, so siiRL's reward node is "
                "passed through and applies no KL penalty; set it to False and use "
                "actor_rollout_ref.actor.use_kl_loss=True instead"
            )
        worker: Any = kwargs.get("_dag_worker_instance")
        step = int(worker.global_steps) if hasattr(worker, "global_steps") else self._calls
        self._calls += 1
        rank = int(getattr(worker, "_rank", 0))
        validate = bool(getattr(batch.get("validate", None), "data", False))
        caps = caps_from_siirl(config)
        records = _blocking(self._run(config, batch, step, rank, validate, caps))
        return node_output(batch, records, caps, pad_token_id=self._pad_id(worker))

    def batch_name(self, step: int, rank: int, validate: bool = False) -> str:
        return self.settings.batch_name(self.run_id, f"val{step}" if validate else step, f"r{rank}")

    async def _run(
        self, config: Any, batch: TensorDict, step: int, rank: int, validate: bool, caps: LengthCaps
    ) -> list[RolloutRecord]:
        uids = [int(u) for u in batch.get("uid").tolist()]
        order, group_size = groups_of(uids)
        rows = _rows(batch)
        instances = [instance_from_row(rows[uids.index(u)]) for u in order]
        name = self.batch_name(step, rank, validate)
        rollout = config.actor_rollout_ref.rollout
        source = rollout.val_kwargs if validate and hasattr(rollout, "val_kwargs") else rollout
        sampling = sampling_from(
            {
                "temperature": source.temperature,
                "top_p": source.top_p,
                "top_k": getattr(source, "top_k", None),
            }
        )

        def inference(member: int) -> dict[str, Any]:
            return self.settings.inference_for(
                member,
                sampling=sampling,
                max_sampled_tokens=caps.max_sampled_tokens,
                max_context_tokens=caps.max_context_tokens,
            )

        async with self.settings.connect() as client:
            await client.submit_batch(
                instances,
                group_size,
                batch=name,
                inference=inference(0),
                agent=self.settings.agent or None,
                sandbox=self.settings.sandbox or None,
                reward=self.settings.reward or None,
                mode="validate" if validate else self.settings.mode,
                weight_version=str(step),
                member_inference=[inference(m) for m in range(group_size)]
                if len(self.settings.endpoints) > 1
                else None,
                trainer_labels=[{"uid": u} for u in order],
            )
            await client.wait(name, timeout=self.settings.timeout_seconds)
            records = await client.results(name)
        by_position = {(r.sample, r.member): r for r in records}
        return [by_position[(order.index(u), i - uids.index(u))] for i, u in enumerate(uids)]

    def _pad_id(self, worker: Any) -> int:
        if self.pad_token_id is not None:
            return self.pad_token_id
        tokenizer = getattr(worker, "validate_tokenizer", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        return int(pad) if pad is not None else 0


def with_swe_rollout(graph: TaskGraph, node: SWERolloutNode) -> TaskGraph:
    """``graph`` (from siiRL's own pipeline function) with ``node`` as its one rollout node."""
    rollouts = graph.get_nodes_by_role(NodeRole.ROLLOUT)
    if len(rollouts) != 1:
        raise ClientConfigError(
            f"pipeline {graph.graph_id!r} has {len(rollouts)} rollout nodes; the SWE rollout node replaces exactly one "
            "(multi-agent pipelines are not supported)"
        )
    target = rollouts[0]
    # No executable_ref: Node.copy() would re-import the replaced function from it.
    target.executable_ref = None
    target.executable = node
    return graph


def settings_from_env() -> AdapterSettings:
    """The settings from the YAML/JSON file named by ``$SWEROLLOUT_SIIRL_SETTINGS`` (siiRL
    calls ``custom_pipeline_fn`` without arguments)."""
    path = os.environ.get(SETTINGS_ENV)
    if not path:
        raise ClientConfigError(
            f"{SETTINGS_ENV} is not set: point it at a YAML file with the adapter settings (endpoints, tokenizer, ...; "
            "docs/trainers-siirl.md)"
        )
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClientConfigError(f"{SETTINGS_ENV}={path} cannot be read: {exc}") from exc
    if raw is not None and not isinstance(raw, Mapping):
        raise ClientConfigError(f"{SETTINGS_ENV}={path} must hold a mapping of settings, got {type(raw).__name__}")
    return AdapterSettings.parse(raw, f"the settings file {path} ({SETTINGS_ENV})")


def swe_grpo_pipeline() -> TaskGraph:
    """``dag.custom_pipeline_fn=swerollout.trainers.siirl:swe_grpo_pipeline``: siiRL's own
    GRPO pipeline with the SWE rollout node (settings from ``$SWEROLLOUT_SIIRL_SETTINGS``)."""
    from siirl.execution.dag.builtin_pipelines import grpo_pipeline

    return with_swe_rollout(grpo_pipeline(), SWERolloutNode(settings_from_env()))


__all__ = [
    "SETTINGS_ENV",
    "STATUS_KEY",
    "settings_from_env",
    "swe_grpo_pipeline",
    "SWERolloutNode",
    "caps_from_siirl",
    "groups_of",
    "rollout_metrics",
    "rollout_tensors",
    "with_swe_rollout",
]
