"""Logprob fidelity: what tiny-lm reports token by token equals a teacher-forced pass.

A multi-turn token-in/token-out conversation runs against a real server: each
request sends the previous input_ids + output_ids + environment tokens. At the
end the whole token list is scored in ONE forward pass of an independently built
copy of the model (same seed, same config), and every sampled token's recorded
logprob must match log_softmax(logits / temperature) at its position within 1e-4.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from swerollout_dev.policy_server.policies.tiny_lm import KVCache, build_model, log_softmax
from tests.support.ps_support import render

TEMPERATURE = 0.8
TOLERANCE = 1e-4


async def test_multi_turn_logprobs_match_teacher_forcing(policy_server, tokenizer) -> None:
    server = policy_server("tiny-lm", seed=0)
    tokens = render(tokenizer, [{"role": "user", "content": "Fix the failing test in utils.py."}])
    sampled: list[tuple[int, int, float]] = []  # (position, token id, recorded logprob)
    async with httpx.AsyncClient(timeout=60) as client:
        for turn in range(3):
            body: dict[str, Any] = {
                "rid": f"fidelity-t{turn:04d}",
                "input_ids": tokens,
                "sampling_params": {
                    "max_new_tokens": 10,
                    "temperature": TEMPERATURE,
                    "top_p": 0.95,
                    "top_k": 200,
                    "sampling_seed": 100 + turn,
                },
                "return_logprob": True,
            }
            reply = (await client.post(server.url + "/generate", json=body)).json()
            assert reply["meta_info"]["prompt_tokens"] == len(tokens)
            for offset, (logprob, token_id, _) in enumerate(reply["meta_info"]["output_token_logprobs"]):
                assert token_id == reply["output_ids"][offset]
                sampled.append((len(tokens) + offset, token_id, logprob))
            environment = tokenizer.encode(
                f"<|im_end|>\n<|im_start|>user\nobservation {turn}: 3 tests failed<|im_end|>\n<|im_start|>assistant\n",
                add_special_tokens=False,
            )
            tokens = tokens + reply["output_ids"] + environment
    assert len(sampled) == 30

    # One uncached pass over the whole list: the server's KV-cached decode must agree with it.
    model = build_model(len(tokenizer), seed=0, context_length=32768)
    logits = model.forward(tokens, KVCache(model.config), all_logits=True)
    temperature = np.float32(TEMPERATURE)
    for position, token_id, recorded in sampled:
        assert tokens[position] == token_id
        expected = float(log_softmax(logits[position - 1] / temperature)[token_id])
        assert abs(expected - recorded) <= TOLERANCE, (position, expected, recorded)
    # The check has teeth: a neighbouring position's distribution gives different values.
    shifted = [float(log_softmax(logits[p - 2] / temperature)[t]) for p, t, _ in sampled]
    assert max(abs(s - r) for s, (_, _, r) in zip(shifted, sampled, strict=True)) > 10 * TOLERANCE
