"""verl 0.9.1: SWE rollouts as an agent loop, or as the whole rollout step.

Two hooks, pick one (docs/trainers-verl.md has the config lines):

- :class:`SWERolloutAgentLoop`, registered as ``swerollout``: verl's agent-loop workers
  call ``run`` once per sample; each call submits one rollout (``submit_one``) and waits
  for it on the worker's one shared watch.
- :class:`SWERolloutAgentLoopManager` (``actor_rollout_ref.rollout.agent.agent_loop_manager_class``):
  verl hands it the step's whole batch; it submits ONE batch (tasks x ``rollout.n``),
  waits, and returns the DataProto verl's own workers would, padded by verl's own code.

Both map a record with :func:`agent_loop_output`, on the shared rule of
:mod:`swerollout.trainers._records`: ``response_mask`` is our loss mask, the reward is
set (so verl's reward loop is skipped and puts it on the last response token), weight
versions become ``extra_fields`` ``min_global_steps``/``max_global_steps``. verl pads
to ``prompt_length``/``response_length`` and never truncates, so both caps are mapped
onto the spec (``maxSampledTokens``, ``maxContextTokens``) and checked on every record:
an overflow fails naming the setting.

Settings live in the trainer config under ``swerollout:`` (see
:class:`~swerollout.trainers._settings.AdapterSettings`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    _InternalAgentLoopOutput,
    register,
)
from verl.protocol import DataProto

from swerollout.client import ClientConfigError, RolloutRecord
from swerollout.trainers._records import (
    LengthCaps,
    TrainerAdapterError,
    has_tokens,
    reward_of,
    sampling_from,
    token_arrays,
)
from swerollout.trainers._settings import AdapterSettings, instance_from_row, shared_client

AGENT_NAME = "swerollout"
SETTINGS_KEY = "swerollout"
"""The trainer config's section for these settings (``+swerollout.endpoints=[...]`` on the command line)."""


def settings_from_verl(config: Any) -> AdapterSettings:
    """The adapter settings from verl's trainer config (its ``swerollout`` section)."""
    from omegaconf import OmegaConf

    section = config.get(SETTINGS_KEY) if hasattr(config, "get") else None
    raw = OmegaConf.to_container(section, resolve=True) if section is not None else None
    mapping = {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else None
    return AdapterSettings.parse(mapping, f"the trainer config's {SETTINGS_KEY} section")


def caps_from_verl(rollout_config: Any) -> LengthCaps:
    """verl pads prompts to ``rollout.prompt_length`` and responses to ``rollout.response_length``."""
    return LengthCaps(
        prompt=int(rollout_config.prompt_length),
        response=int(rollout_config.response_length),
        prompt_setting="actor_rollout_ref.rollout.prompt_length",
        response_setting="actor_rollout_ref.rollout.response_length",
    )


def verl_sampling(rollout_config: Any, validate: bool) -> dict[str, Any]:
    """spec.inference.sampling from verl's rollout config (``val_kwargs`` when validating)."""
    source = rollout_config.val_kwargs if validate else rollout_config
    return sampling_from({"temperature": source.temperature, "top_p": source.top_p, "top_k": source.top_k})


def agent_loop_output(
    record: RolloutRecord, caps: LengthCaps, *, pad_token_id: int, moe_layers: int | None = None
) -> AgentLoopOutput:
    """One finished record as verl's ``AgentLoopOutput``.

    A run that failed before its first request has no tokens; verl cannot drop a sample
    from a step, so it becomes one padding token of prompt and of response with mask 0
    and reward 0 (it stays in its group and trains nothing), marked in ``extra_fields``.
    """
    extra: dict[str, Any] = {
        "swerollout_name": record.name,
        "swerollout_status": record.status.value,
        "exit_status": record.exit_status,
        "truncated": record.truncated,
    }
    metrics = AgentLoopMetrics(
        generate_sequences=float(record.timings.get("generation", 0.0)),
        tool_calls=float(record.timings.get("tools", 0.0)),
    )
    if not has_tokens(record):
        return AgentLoopOutput(
            prompt_ids=[pad_token_id],
            response_ids=[pad_token_id],
            response_mask=[0],
            response_logprobs=[0.0],
            reward_score=reward_of(record),
            num_turns=0,
            metrics=metrics,
            extra_fields={**extra, "min_global_steps": -1, "max_global_steps": -1},
        )
    arrays = token_arrays(record, caps)
    versions = record.versions_as_int(-1)[arrays.loss_mask == 1]
    extra["min_global_steps"] = int(versions.min()) if versions.size else -1
    extra["max_global_steps"] = int(versions.max()) if versions.size else -1
    routed = None
    if record.routed_experts is not None:
        if moe_layers is None:
            raise TrainerAdapterError(
                f"rollout {record.name} carries MoE routing ({record.routed_experts.shape[1]} values per token) and "
                "swerollout.moe_layers is unset: set it to the policy's number of MoE layers"
            )
        routed = record.routed_experts.reshape(record.routed_experts.shape[0], moe_layers, -1)
    return AgentLoopOutput(
        prompt_ids=arrays.prompt_ids.tolist(),
        response_ids=arrays.response_ids.tolist(),
        response_mask=arrays.loss_mask.tolist(),
        response_logprobs=arrays.logprobs.tolist(),
        routed_experts=routed,
        reward_score=arrays.reward,
        # user, then one assistant and one tool message per turn (verl counts all chat turns)
        num_turns=1 + 2 * record.turns,
        metrics=metrics,
        extra_fields=extra,
    )


def postprocessor(config: Any, tokenizer: Any) -> Any:
    """verl's own per-sample padding and batch assembly (``_agent_loop_postprocess``,
    ``_postprocess``) without its Ray worker: the fields those methods read, nothing else.
    Rewards are set by the adapter, so verl's reward loop is never asked."""
    worker: Any = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.config = config
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.tokenizer = tokenizer
    worker.processor = None
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    return worker


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else 0


def _label(value: Any) -> str | int:
    """A trainer label as JSON-safe scalar (verl rows hold numpy scalars)."""
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


@register(AGENT_NAME)
class SWERolloutAgentLoop(AgentLoopBase):  # type: ignore[misc]  # verl is not followed (pyproject: mypy overrides)
    """One SWE rollout per call of ``run``: the dataset row's task, verl's sampling
    parameters, the step's caps; returns when the rollout is finished and graded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings_from_verl(self.config)
        self.caps = caps_from_verl(self.rollout_config)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        instance = instance_from_row(kwargs)
        index = int(kwargs["index"]) if kwargs.get("index") is not None else 0
        client = shared_client(self.settings)
        labels = {k: _label(kwargs[k]) for k in ("uid", "index") if kwargs.get(k) is not None}
        # Members of a GRPO group run in different workers and never learn their rank, so each
        # sample is a batch of its own; the group lives in the uid label.
        name = await client.submit_one(
            instance,
            batch=self.settings.batch_name(secrets.token_hex(6)),
            sample=max(index, 0),
            inference=self.settings.inference_for(
                index,
                sampling=sampling_from(sampling_params),
                max_sampled_tokens=self.caps.max_sampled_tokens,
                max_context_tokens=self.caps.max_context_tokens,
            ),
            agent=self.settings.agent or None,
            sandbox=self.settings.sandbox or None,
            reward=self.settings.reward or None,
            mode=self.settings.mode,
            trainer_labels=labels,
        )
        record = await client.result(name, timeout=self.settings.timeout_seconds)
        return agent_loop_output(
            record, self.caps, pad_token_id=_pad_id(self.tokenizer), moe_layers=self.settings.moe_layers
        )


class SWERolloutAgentLoopManager:
    """verl's ``agent_loop_manager_class``: the whole step's rollouts as one batch.

    ``generate_sequences`` takes verl's repeated batch (``rollout.n`` consecutive rows per
    ``uid``), submits the tasks with group size n (batch ``<prefix>-<run id>-<step>``,
    weight version = the step), waits, and assembles the output with verl's own
    post-processing, rows in the order they came.
    """

    def __init__(
        self,
        config: Any,
        llm_client: Any = None,
        teacher_client: Any = None,
        reward_loop_worker_handles: Any = None,
        *,
        tokenizer: Any = None,
    ) -> None:
        self.config = config
        self.settings = settings_from_verl(config)
        self.caps = caps_from_verl(config.actor_rollout_ref.rollout)
        if tokenizer is None:
            from verl.utils.tokenizer import hf_tokenizer

            load: Any = hf_tokenizer
            tokenizer = load(config.actor_rollout_ref.model.path)
        self.tokenizer = tokenizer
        self.run_id = secrets.token_hex(3)
        """Keeps this run's batch names apart from an earlier run's with the same steps."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> SWERolloutAgentLoopManager:
        return cls(*args, **kwargs)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """The step's rollouts as verl's ``generate_sequences`` returns them (blocking, as verl calls it)."""
        from verl.utils.ray_utils import auto_await

        blocking: Any = auto_await
        result: DataProto = blocking(self.agenerate_sequences)(prompts)
        return result

    async def agenerate_sequences(self, prompts: DataProto) -> DataProto:
        rows = prompts.non_tensor_batch
        n = len(prompts)
        uids = [str(u) for u in rows["uid"]] if "uid" in rows else [str(i) for i in range(n)]
        order = list(dict.fromkeys(uids))
        members = {u: [i for i, v in enumerate(uids) if v == u] for u in order}
        sizes = {len(m) for m in members.values()}
        if len(sizes) != 1:
            raise ClientConfigError(
                f"every uid needs the same number of rows (rollout.n); got group sizes {sorted(sizes)}"
            )
        group_size = sizes.pop()
        for u, idx in members.items():
            if idx != list(range(idx[0], idx[0] + group_size)):
                raise ClientConfigError(
                    f"the rows of uid {u} are not consecutive; repeat the batch with interleave=True"
                )
        validate = bool(prompts.meta_info.get("validate", False))
        step = int(prompts.meta_info.get("global_steps", 0))
        batch = self.settings.batch_name(self.run_id, f"val{step}" if validate else step)

        def row_of(i: int) -> dict[str, Any]:
            return {k: v[i] for k, v in rows.items()}

        instances = [instance_from_row(row_of(members[u][0])) for u in order]
        async with self.settings.connect() as client:
            await client.submit_batch(
                instances,
                group_size,
                batch=batch,
                inference=self.settings.inference_for(
                    0,
                    sampling=verl_sampling(self.config.actor_rollout_ref.rollout, validate),
                    max_sampled_tokens=self.caps.max_sampled_tokens,
                    max_context_tokens=self.caps.max_context_tokens,
                ),
                agent=self.settings.agent or None,
                sandbox=self.settings.sandbox or None,
                reward=self.settings.reward or None,
                mode="validate" if validate else self.settings.mode,
                weight_version=str(step),
                member_inference=self._spread(group_size, validate),
            )
            await client.wait(batch, timeout=self.settings.timeout_seconds)
            records = await client.results(batch)
        by_position = {(r.sample, r.member): r for r in records}
        worker = postprocessor(self.config, self.tokenizer)
        outputs: list[_InternalAgentLoopOutput] = []
        for sample, u in enumerate(order):
            for member, i in enumerate(members[u]):
                output = agent_loop_output(
                    by_position[(sample, member)],
                    self.caps,
                    pad_token_id=_pad_id(self.tokenizer),
                    moe_layers=self.settings.moe_layers,
                )
                outputs.append(await worker._agent_loop_postprocess(output, validate, **row_of(i)))
        output_batch: DataProto = worker._postprocess(outputs, input_non_tensor_batch=rows, validate=validate)
        return output_batch

    def _spread(self, group_size: int, validate: bool) -> Sequence[Mapping[str, Any]] | None:
        """One server per member, round robin over the configured endpoints (None for one endpoint)."""
        if len(self.settings.endpoints) == 1:
            return None
        sampling = verl_sampling(self.config.actor_rollout_ref.rollout, validate)
        return [
            self.settings.inference_for(
                m,
                sampling=sampling,
                max_sampled_tokens=self.caps.max_sampled_tokens,
                max_context_tokens=self.caps.max_context_tokens,
            )
            for m in range(group_size)
        ]


__all__ = [
    "AGENT_NAME",
    "SWERolloutAgentLoop",
    "SWERolloutAgentLoopManager",
    "agent_loop_output",
    "caps_from_verl",
    "postprocessor",
    "settings_from_verl",
]
