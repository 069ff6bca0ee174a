"""tiny-lm's CPU per prefill and per agent turn, against the old path measured in the same run.

    .venv/bin/python -m bench.tiny_lm

Three paths on the same weights:
- ``old``: every query block scores all key positions (the future ones masked), and
  every turn prefills the whole conversation: how tiny-lm worked before. Its attention
  is kept here, as the baseline, and swapped in for the measurement;
- ``causal``: a block scores only keys up to its own last position; no prefix cache;
- ``reuse``: causal, and a turn starts from the previous turn's KV (the server's default).

CPU seconds are the process's (BLAS threads included), so a busy machine stretches the
wall clock but not these much; the ratios are what to compare across runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server.chat_format import ChatFormat
from swerollout_dev.policy_server.policies import PolicyContext, SamplingConfig, TokenSample, tiny_lm
from swerollout_dev.policy_server.policies.tiny_lm import Array, KVCache, TinyConfig, TinyLMPolicy

PREFILL_TOKENS = 3000
TURNS = 10
FIRST_PROMPT = 2000  # system prompt + task, as an agent's first request
TOOL_OUTPUT = 150  # tokens each later turn adds after the model's output
OUTPUT = 16  # tokens sampled per turn
REPEATS = 3


def _full_width_attention(q: Array, keys: Array, values: Array, start: int, c: TinyConfig) -> Array:
    """The old attention: each query block scores every key position, then masks the future ones."""
    group = c.num_heads // c.num_kv_heads
    k = np.repeat(keys, group, axis=1).transpose(1, 2, 0)
    v = np.repeat(values, group, axis=1).transpose(1, 0, 2)
    scale = np.float32(1.0 / np.sqrt(c.head_dim))
    out = np.empty((q.shape[0], c.num_heads * c.head_dim), np.float32)
    for lo in range(0, q.shape[0], tiny_lm._QUERY_BLOCK):
        hi = min(lo + tiny_lm._QUERY_BLOCK, q.shape[0])
        scores = (q[lo:hi].transpose(1, 0, 2) @ k) * scale
        future = np.arange(keys.shape[0])[None, :] > np.arange(start + lo, start + hi)[:, None]
        masked = np.where(future, np.float32(-np.inf), scores).astype(np.float32, copy=False)
        exp = np.exp(masked - masked.max(axis=-1, keepdims=True))
        out[lo:hi] = ((exp / exp.sum(axis=-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(hi - lo, -1)
    return out


@contextmanager
def _attention(old: bool) -> Iterator[None]:
    current = tiny_lm._attention
    tiny_lm._attention = _full_width_attention if old else current
    try:
        yield
    finally:
        tiny_lm._attention = current


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _conversation(policy: TinyLMPolicy, rng: np.random.Generator) -> list[float]:
    """CPU seconds of each turn (prefill and OUTPUT decode steps) of a TURNS-turn agent conversation."""
    context = [int(t) for t in rng.integers(0, 5000, size=FIRST_PROMPT)]
    costs = []
    for turn in range(TURNS):
        generation = policy.start(context, SamplingConfig(temperature=1.0, top_p=1.0, top_k=-1, seed=turn))
        samples: list[TokenSample | None] = []
        costs.append(_cpu(lambda: samples.extend(generation.next_token() for _ in range(OUTPUT))))  # noqa: B023 (called at once)
        output = [s.token_id for s in samples if s is not None]
        context = context + output + [int(t) for t in rng.integers(0, 5000, size=TOOL_OUTPUT)]
    return costs


def run() -> dict[str, Any]:
    tokenizer = load_tokenizer("qwen-2.5")
    policy_context = PolicyContext(
        tokenizer=tokenizer,
        chat_format=ChatFormat.from_tokenizer(tokenizer),
        tasks_file=None,
        seed=0,
        context_length=32768,
    )
    reusing, prefilling = TinyLMPolicy(policy_context), TinyLMPolicy(policy_context, prefix_entries=0)
    model = reusing.model
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, 5000, size=PREFILL_TOKENS)]
    prefill: dict[str, list[float]] = {"old": [], "causal": []}
    for _ in range(REPEATS):  # interleaved, so load changes hit both alike
        for name in prefill:
            with _attention(old=name == "old"):
                prefill[name].append(_cpu(lambda: model.forward(tokens, KVCache(model.config))))
    turns: dict[str, list[float]] = {}
    for name, policy in (("old", prefilling), ("causal", prefilling), ("reuse", reusing)):
        with _attention(old=name == "old"):
            turns[name] = _conversation(policy, np.random.default_rng(2))
    return {"prefill_cpu_s": {name: min(costs) for name, costs in prefill.items()}, "turn_cpu_s": turns}


def report(result: dict[str, Any]) -> str:
    p = result["prefill_cpu_s"]
    lines = [
        f"prefill {PREFILL_TOKENS} tokens (best of {REPEATS}): old {p['old']:.3f} CPU-s, "
        f"causal {p['causal']:.3f} CPU-s = {p['causal'] / p['old']:.2f}x old",
        f"{TURNS}-turn conversation ({FIRST_PROMPT}-token prompt, +{OUTPUT} sampled +{TOOL_OUTPUT} tool tokens a turn),"
        " CPU-s per turn:",
        "  turn  context    old  causal  reuse",
    ]
    t = result["turn_cpu_s"]
    for turn in range(TURNS):
        context = FIRST_PROMPT + turn * (OUTPUT + TOOL_OUTPUT)
        costs = "  ".join(f"{t[name][turn]:.3f}" for name in ("old", "causal", "reuse"))
        lines.append(f"  {turn + 1:>4}  {context:>7}  {costs}")
    total = {name: sum(costs) for name, costs in t.items()}
    later = {name: sum(costs[1:]) / (TURNS - 1) for name, costs in t.items()}
    lines.append(
        f"  total: old {total['old']:.2f}, causal {total['causal']:.2f} ({total['causal'] / total['old']:.2f}x old), "
        f"reuse {total['reuse']:.2f} ({total['reuse'] / total['old']:.2f}x old)"
    )
    lines.append(
        f"  mean of turns 2-{TURNS}: old {later['old']:.3f}, causal {later['causal']:.3f}, "
        f"reuse {later['reuse']:.3f} ({later['reuse'] / later['old']:.3f}x old)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
