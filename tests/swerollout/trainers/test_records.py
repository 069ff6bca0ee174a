"""The record -> token-array rule the trainer adapters share (swerollout.trainers._records),
on records built exactly as the client builds them from an object and its trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from swerollout.client.records import TrainerStatus
from swerollout.trainers._records import (
    LengthCaps,
    LengthOverflow,
    NotFinished,
    reward_of,
    sampling_from,
    token_arrays,
)
from tests.support.client_support import make_trajectory, record_of


def test_arrays_are_the_trajectory_split_at_the_prompt() -> None:
    trajectory = make_trajectory(3)
    arrays = token_arrays(record_of(trajectory))
    assert arrays.prompt_ids.tolist() == trajectory.prompt_ids
    assert arrays.response_ids.tolist() == trajectory.response_ids
    assert arrays.input_ids.tolist() == trajectory.prompt_ids + trajectory.response_ids
    assert arrays.loss_mask.tolist() == trajectory.loss_mask
    assert arrays.full_loss_mask.tolist() == [0] * len(trajectory.prompt_ids) + trajectory.loss_mask
    assert arrays.logprobs.dtype == np.float32 and arrays.logprobs.tolist() == trajectory.logprobs
    assert arrays.full_logprobs.size == arrays.input_ids.size
    assert arrays.reward == 1.0 and arrays.status is TrainerStatus.COMPLETED and not arrays.truncated


def test_truncated_and_ungraded_runs_keep_their_tokens_at_reward_zero() -> None:
    arrays = token_arrays(record_of(make_trajectory(4, "exit_context"), reward=None))
    assert arrays.truncated and arrays.status is TrainerStatus.TRUNCATED
    assert arrays.reward == 0.0 and arrays.response_ids.size > 0


def test_an_unfinished_run_is_refused() -> None:
    with pytest.raises(NotFinished, match="b-0-1 is not finished"):
        token_arrays(record_of(None, phase="Running", reward=None))


def test_length_caps_fail_loudly_naming_the_setting() -> None:
    trajectory = make_trajectory(5)
    record = record_of(trajectory)
    prompt, response = len(trajectory.prompt_ids), len(trajectory.response_ids)
    fits = LengthCaps(prompt=prompt, response=response)
    assert token_arrays(record, fits).response_ids.size == response
    assert fits.max_sampled_tokens == response and fits.max_context_tokens == prompt + response
    short = LengthCaps(prompt=prompt, response=response - 1, response_setting="rollout.response_length")
    with pytest.raises(
        LengthOverflow, match=rf"response has {response} tokens.*rollout.response_length={response - 1}"
    ):
        token_arrays(record, short)
    with pytest.raises(LengthOverflow, match=rf"prompt has {prompt} tokens"):
        token_arrays(record, LengthCaps(prompt=prompt - 1))
    with pytest.raises(ValueError, match="at least 1"):
        LengthCaps(response=0)


def test_reward_and_sampling_mapping() -> None:
    assert reward_of(record_of(make_trajectory(1), reward=0.5)) == 0.5
    assert sampling_from({"temperature": 0.7, "top_p": 0.9, "top_k": 0, "logprobs": True}) == {
        "temperature": 0.7,
        "topP": 0.9,
        "topK": -1,
    }
    assert sampling_from({"top_k": 20}) == {"topK": 20}
    assert sampling_from({"top_k": 100_000_000}) == {"topK": -1}  # AReaL's default: no top-k
