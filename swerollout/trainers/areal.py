"""AReaL 1.0.4: SWE rollouts as a ``RolloutWorkflow``.

AReaL's workflow executor calls ``arun_episode(engine, data)`` once per prompt (a dataset
row carrying a SWE-bench task). :class:`SWERolloutWorkflow` submits ONE batch per prompt
with ``group_size`` members, waits for them on the process's shared watch, and returns
the ``[G, L]`` dict AReaL trains on, built per member by :func:`episode_tensors` on the
shared rule of :mod:`swerollout.trainers._records`:

- ``input_ids`` int32, ``attention_mask`` bool: prompt + response, right-padded by
  AReaL's own ``concat_padded_tensors``;
- ``loss_mask`` int32: our loss mask (0 on the prompt);
- ``logprobs`` float32: the sampling logprobs (0.0 where the mask is 0);
- ``versions`` int32: the weight version that sampled each token, ``-1`` on every token
  the policy did not sample (prompt, tool output, template), as AReaL's proximal-logprob
  approximation expects;
- ``rewards`` float32 ``[G]``.

Weight versions: the batch is submitted with ``weight_version=str(engine.get_version())``;
AReaL pauses its servers (``/pause_generation``) around a weight update, and the runners
ride that out and keep going. Tokens carry the version SGLang reports, else the submitted
one. A group with a member that failed before sampling anything is rejected (``None``),
since GRPO groups must stay whole.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from areal.api.workflow_api import RolloutWorkflow
from areal.utils.data import concat_padded_tensors

from swerollout.client import RolloutRecord
from swerollout.trainers._records import LengthCaps, has_tokens, sampling_from, token_arrays
from swerollout.trainers._settings import AdapterSettings, instance_from_row, shared_client


def episode_tensors(record: RolloutRecord, caps: LengthCaps | None = None) -> dict[str, torch.Tensor]:
    """One finished record as AReaL's per-sequence dict of ``[1, L]`` tensors (``rewards`` ``[1]``)."""
    arrays = token_arrays(record, caps)
    versions = np.concatenate([np.full(arrays.prompt_ids.size, -1, dtype=np.int64), record.versions_as_int(-1)])
    length = arrays.input_ids.size
    return {
        "input_ids": torch.from_numpy(arrays.input_ids.astype(np.int32)).unsqueeze(0),
        "loss_mask": torch.from_numpy(arrays.full_loss_mask.astype(np.int32)).unsqueeze(0),
        "logprobs": torch.from_numpy(arrays.full_logprobs.astype(np.float32)).unsqueeze(0),
        "versions": torch.from_numpy(versions.astype(np.int32)).unsqueeze(0),
        "attention_mask": torch.ones((1, length), dtype=torch.bool),
        "rewards": torch.tensor([arrays.reward], dtype=torch.float32),
    }


def group_tensors(records: list[RolloutRecord], caps: LengthCaps | None = None) -> dict[str, Any] | None:
    """A group's ``[G, L]`` dict in member order, or None (rejected) when a member has no tokens."""
    if not records or not all(has_tokens(r) for r in records):
        return None
    ordered = sorted(records, key=lambda r: r.member)
    group: dict[str, Any] = concat_padded_tensors([episode_tensors(r, caps) for r in ordered])
    return group


class SWERolloutWorkflow(RolloutWorkflow):  # type: ignore[misc]
    """One prompt -> one batch of ``group_size`` SWE rollouts.

    ``gconfig`` (AReaL's ``GenerationHyperparameters``, optional) gives temperature,
    top_p, top_k and ``max_new_tokens`` per model turn; ``max_tokens`` (AReaL's cap on a
    whole sequence) becomes ``maxContextTokens`` and is checked on every record.
    """

    def __init__(
        self,
        settings: AdapterSettings | Mapping[str, Any],
        group_size: int,
        *,
        gconfig: Any = None,
        max_tokens: int | None = None,
        max_sampled_tokens: int | None = None,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be at least 1, got {group_size}")
        self.settings = (
            settings
            if isinstance(settings, AdapterSettings)
            else AdapterSettings.parse(settings, "the workflow's settings")
        )
        self.group_size = group_size
        self.sampling: dict[str, Any] = {}
        if gconfig is not None:
            self.sampling = sampling_from(
                {"temperature": gconfig.temperature, "top_p": gconfig.top_p, "top_k": gconfig.top_k}
            )
            self.sampling["maxNewTokens"] = int(gconfig.max_new_tokens)
            max_tokens = max_tokens if max_tokens is not None else getattr(gconfig, "max_tokens", None)
        self.caps = LengthCaps(total=int(max_tokens) if max_tokens else None, total_setting="gconfig.max_tokens")
        self.max_sampled_tokens = max_sampled_tokens
        self.run_id = secrets.token_hex(3)
        self._episodes = itertools.count()

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        instance = instance_from_row(data)
        version = int(engine.get_version())
        episode = next(self._episodes)
        client = shared_client(self.settings)
        names = await client.submit_batch(
            [instance],
            self.group_size,
            batch=self.settings.batch_name(self.run_id, episode),
            inference=self.settings.inference_for(
                episode,
                sampling=self.sampling,
                max_sampled_tokens=self.max_sampled_tokens,
                max_context_tokens=self.caps.max_context_tokens,
            ),
            agent=self.settings.agent or None,
            sandbox=self.settings.sandbox or None,
            reward=self.settings.reward or None,
            mode=self.settings.mode,
            weight_version=str(version),
        )
        records = await asyncio.gather(*(client.result(n, timeout=self.settings.timeout_seconds) for n in names))
        return group_tensors(list(records), self.caps)
