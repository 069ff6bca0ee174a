"""`tiny-lm`: a tiny randomly initialised Qwen2 transformer, sampled for real on CPU.

The model is built in code (no weights are downloaded): Qwen2ForCausalLM with the
config in ``tiny_config``, the vocabulary size of the served tokenizer, and
weights drawn from a fixed seed, so every process that builds it with the same
seed and tokenizer gets bit-identical weights. Its text is gibberish; what it is
for is real token-level behaviour: sampling, seeds, stop tokens, logprobs and
aborts that land between two decode steps of a KV-cached generation.

Logprobs (``output_token_logprobs``): for each sampled token, its log-probability
under ``log_softmax(logits / temperature)`` over the full vocabulary, computed
in float32 from the logits of that decode step, BEFORE top-k / top-p truncation
(this is SGLang's default). With temperature 0 (greedy) the raw logits are used,
i.e. ``log_softmax(logits)``. So teacher-forcing the final token list through
the same model and taking ``log_softmax(logits / temperature)`` at each sampled
position reproduces the recorded values (up to float rounding of the KV cache).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swerollout.dev.policy_server.policies import PolicyContext, SamplingConfig, TokenSample

if TYPE_CHECKING:
    import torch


def tiny_config(vocab_size: int, context_length: int) -> dict[str, Any]:
    """Keyword arguments of Qwen2Config: two layers, 64 wide; a decode step costs a few ms."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": context_length,
        "tie_word_embeddings": True,
        # Wider than the usual 0.02 so the next-token distribution is not nearly uniform
        # (sampling settings then visibly change what is sampled).
        "initializer_range": 0.05,
        "use_cache": True,
    }


def build_model(vocab_size: int, *, seed: int, context_length: int) -> Any:
    """The tiny Qwen2 model, deterministic in (vocab_size, seed, context_length)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**tiny_config(vocab_size, context_length))
    config._attn_implementation = "sdpa"  # memory-efficient on long prompts
    devices_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(devices_state)
    model.train(False)  # inference mode: no dropout
    return model


def sample_token(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> TokenSample:
    """Sample from one position's logits; the logprob is documented in the module docstring."""
    import torch

    logits = logits.float()
    if sampling.temperature <= 0.0:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits).item())
        return TokenSample(token_id=token, logprob=float(logprobs[token].item()))
    scaled = logits / sampling.temperature
    logprobs = torch.log_softmax(scaled, dim=-1)
    probs = logprobs.exp()
    if 0 < sampling.top_k < probs.numel():
        kth = torch.topk(probs, sampling.top_k).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        # Keep every token whose predecessors have not yet reached top_p (so at least one).
        sorted_probs = torch.where(before < sampling.top_p * sorted_probs.sum(), sorted_probs, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator).item())
    return TokenSample(token_id=token, logprob=float(logprobs[token].item()))


@dataclass
class TinyLMGeneration:
    """One request's decode state: a KV cache and the logits of the next position."""

    model: Any
    lock: threading.Lock
    input_ids: list[int]
    sampling: SamplingConfig
    _cache: Any = None
    _next_logits: Any = None
    _pending: int | None = None
    _generator: Any = None

    def next_token(self) -> TokenSample | None:
        import torch
        from transformers import DynamicCache

        with self.lock, torch.inference_mode():
            if self._cache is None:
                self._generator = torch.Generator().manual_seed(self.sampling.seed)
                self._cache = DynamicCache(config=self.model.config)
                self._next_logits = self._forward(self.input_ids)
            elif self._pending is not None:
                # The previous token is fed lazily, so an abort right after sampling it
                # costs no extra decode step.
                self._next_logits = self._forward([self._pending])
            sample = sample_token(self._next_logits, self.sampling, self._generator)
            self._pending = sample.token_id
        return sample

    def _forward(self, token_ids: list[int]) -> Any:
        import torch

        tokens = torch.tensor([token_ids], dtype=torch.long)
        out = self.model(input_ids=tokens, cache=self._cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]


class TinyLMPolicy:
    name = "tiny-lm"
    offload = True

    def __init__(self, context: PolicyContext) -> None:
        import torch

        # The machine is shared; one intra-op thread keeps a decode step polite and fast enough.
        torch.set_num_threads(1)
        self.vocab_size = len(context.tokenizer)
        self.model = build_model(self.vocab_size, seed=context.seed, context_length=context.context_length)
        self._lock = threading.Lock()

    def start(self, input_ids: list[int], sampling: SamplingConfig) -> TinyLMGeneration:
        return TinyLMGeneration(model=self.model, lock=self._lock, input_ids=list(input_ids), sampling=sampling)
