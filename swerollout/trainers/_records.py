"""One rollout record as the token arrays every trainer adapter builds on.

The one home of the record -> token mapping that the verl, AReaL, slime and siiRL
adapters share: where the prompt ends and the response starts, the loss mask (1 =
sampled by the policy, train on it), the sampling logprobs, the per-token weight
versions as ints (-1 on tokens the policy did not sample), MoE routing aligned to the
tokens, the reward a trainer may use, and the length caps a framework's fixed shapes
impose. A framework adapter only renames and reshapes what :func:`token_arrays`
returns; it never re-derives a mask or a version.

Length caps fail loudly: a framework that pads to a fixed length (verl's
``prompt_length``/``response_length``) breaks on a longer sequence, and cutting the
sequence silently would train on a trajectory the policy never finished. The adapters
therefore cap sampling at submit (:meth:`LengthCaps.inference_limits`) and check every
record here (:class:`LengthOverflow` names the setting to raise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from swerollout.client.errors import ClientError
from swerollout.client.records import RolloutRecord, TrainerStatus

TOP_K_OFF = 1_000_000
"""A top-k this large keeps every token (it is also the API's bound on spec.inference.sampling.topK)."""

NO_VERSION = -1
"""The version of a token the policy did not sample (prompt, tool output, template)."""


class TrainerAdapterError(ClientError):
    """A record cannot be handed to the trainer as it is (the message names why and the fix)."""


class LengthOverflow(TrainerAdapterError):
    """A record's prompt or response is longer than the trainer's fixed shape allows."""


class NotFinished(TrainerAdapterError):
    """An adapter that waits for whole runs got a record that is still running or suspended."""


@dataclass(frozen=True)
class LengthCaps:
    """The longest prompt and response (in tokens) a trainer accepts, with the names of
    the settings that set them (for error messages), e.g. verl's
    ``actor_rollout_ref.rollout.prompt_length`` / ``response_length``. None: no cap."""

    prompt: int | None = None
    response: int | None = None
    total: int | None = None
    """Prompt plus response (AReaL's ``gconfig.max_tokens``)."""
    prompt_setting: str = "the prompt length cap"
    response_setting: str = "the response length cap"
    total_setting: str = "the sequence length cap"

    def __post_init__(self) -> None:
        for name, value in (("prompt", self.prompt), ("response", self.response), ("total", self.total)):
            if value is not None and value < 1:
                raise ValueError(f"LengthCaps.{name} must be at least 1 token, got {value}")

    @property
    def max_sampled_tokens(self) -> int | None:
        """``spec.inference.maxSampledTokens`` for these caps: the policy can never sample
        more tokens than the response holds (the response also holds environment tokens,
        which this does not count, so :meth:`check` still guards the total)."""
        return self.response

    @property
    def max_context_tokens(self) -> int | None:
        """``spec.inference.maxContextTokens`` for these caps (prompt plus response), None
        unless that is capped."""
        if self.total is not None:
            return self.total
        if self.prompt is None or self.response is None:
            return None
        return self.prompt + self.response

    def check(self, record: RolloutRecord) -> None:
        """LengthOverflow unless the record fits both caps."""
        prompt, response = int(record.prompt_ids.size), int(record.response_ids.size)
        if self.prompt is not None and prompt > self.prompt:
            raise LengthOverflow(
                f"rollout {record.name}: its prompt has {prompt} tokens, more than {self.prompt_setting}="
                f"{self.prompt}; raise {self.prompt_setting} (the prompt is the task's problem statement "
                "rendered by the agent's templates)"
            )
        if self.response is not None and response > self.response:
            raise LengthOverflow(
                f"rollout {record.name}: its response has {response} tokens ({record.sampled_tokens} sampled, "
                f"{response - record.sampled_tokens} from the environment), more than {self.response_setting}="
                f"{self.response}; raise {self.response_setting}, or lower spec.inference.maxContextTokens so "
                "runs end (exit_context) before their environment output overflows it"
            )
        if self.total is not None and prompt + response > self.total:
            raise LengthOverflow(
                f"rollout {record.name}: it holds {prompt + response} tokens, more than {self.total_setting}="
                f"{self.total}; raise {self.total_setting}"
            )


@dataclass(frozen=True, eq=False)
class TokenArrays:
    """One record, framework-neutral. Response arrays are aligned on ``response_ids``."""

    name: str
    status: TrainerStatus
    prompt_ids: npt.NDArray[np.int64]
    response_ids: npt.NDArray[np.int64]
    loss_mask: npt.NDArray[np.int64]
    """Per response token: 1 = sampled by the policy (train on it), 0 = environment/template."""
    logprobs: npt.NDArray[np.float32]
    """Per response token: the sampling logprob, 0.0 where ``loss_mask`` is 0."""
    reward: float
    truncated: bool

    @property
    def input_ids(self) -> npt.NDArray[np.int64]:
        """``prompt_ids + response_ids``."""
        return np.concatenate([self.prompt_ids, self.response_ids])

    @property
    def full_loss_mask(self) -> npt.NDArray[np.int64]:
        """The loss mask over ``input_ids`` (0 on the prompt)."""
        return np.concatenate([np.zeros(self.prompt_ids.size, dtype=np.int64), self.loss_mask])

    @property
    def full_logprobs(self) -> npt.NDArray[np.float32]:
        """The logprobs over ``input_ids`` (0.0 on the prompt)."""
        return np.concatenate([np.zeros(self.prompt_ids.size, dtype=np.float32), self.logprobs])


def reward_of(record: RolloutRecord) -> float:
    """The reward a trainer uses: the graded value, 0.0 when there is none (a failed or
    ungraded run stays in its GRPO group at 0, as the operator's gating decides)."""
    return float(record.reward) if record.reward is not None else 0.0


def has_tokens(record: RolloutRecord) -> bool:
    """Whether the record carries a trajectory (a run that failed before its first
    request, or one still running, has none)."""
    return record.prompt_ids.size > 0


def token_arrays(record: RolloutRecord, caps: LengthCaps | None = None) -> TokenArrays:
    """The record's arrays, checked against ``caps``. NotFinished for a run that is still
    going (status ``aborted``): the adapters that call this wait for whole runs."""
    if record.status is TrainerStatus.ABORTED:
        raise NotFinished(
            f"rollout {record.name} is not finished (phase {record.phase.value}); wait for it "
            "(client.result(name)) or resume it before mapping it"
        )
    if caps is not None:
        caps.check(record)
    return TokenArrays(
        name=record.name,
        status=record.status,
        prompt_ids=record.prompt_ids.astype(np.int64),
        response_ids=record.response_ids.astype(np.int64),
        loss_mask=record.loss_mask.astype(np.int64),
        logprobs=record.logprobs.astype(np.float32),
        reward=reward_of(record),
        truncated=record.truncated,
    )


def sampling_from(params: dict[str, Any]) -> dict[str, Any]:
    """``spec.inference.sampling`` from a trainer's per-request sampling parameters
    (temperature, top_p, top_k; others are the trainer's own and ignored here)."""
    sampling: dict[str, Any] = {}
    if params.get("temperature") is not None:
        sampling["temperature"] = float(params["temperature"])
    if params.get("top_p") is not None:
        sampling["topP"] = float(params["top_p"])
    top_k = params.get("top_k")
    if top_k is not None:
        # Trainers spell "off" as 0, -1 or a huge k (AReaL's default is 1e8); SGLang (and the
        # API) take only -1. No vocabulary reaches TOP_K_OFF, so such a k filters nothing.
        k = int(top_k)
        sampling["topK"] = -1 if k <= 0 or k >= TOP_K_OFF else k
    return sampling
