"""tiny-lm is Qwen2: the numpy model's logits equal transformers' Qwen2ForCausalLM with the same weights.

The stand-in runs on numpy so that `dev up` costs no torch. This test is where the
architecture is held to the real implementation: every weight of the numpy model is
copied into a `Qwen2ForCausalLM` built from the matching `Qwen2Config`, and both score
the same token list. It also checks that the KV-cached decode the server uses equals
an uncached pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from swerollout.dev.policy_server.policies.tiny_lm import _QUERY_BLOCK, KVCache, TinyLM, build_model

VOCAB = 512
TOKENS = [int(t) for t in np.random.default_rng(7).integers(0, VOCAB, size=2 * _QUERY_BLOCK + 1)]


def _transformers_twin(model: TinyLM) -> Qwen2ForCausalLM:
    c = model.config
    config = Qwen2Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
        max_position_embeddings=c.context_length, rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
        tie_word_embeddings=True, hidden_act="silu",
    )
    config._attn_implementation = "eager"
    twin = Qwen2ForCausalLM(config)
    state = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        # torch Linear stores [out, in]; the numpy model multiplies x @ W with W [in, out].
        state |= {
            p + "input_layernorm.weight": layer.input_norm, p + "post_attention_layernorm.weight": layer.post_norm,
            p + "self_attn.q_proj.weight": layer.q.T, p + "self_attn.k_proj.weight": layer.k.T,
            p + "self_attn.v_proj.weight": layer.v.T, p + "self_attn.o_proj.weight": layer.o.T,
            p + "mlp.gate_proj.weight": layer.gate.T, p + "mlp.up_proj.weight": layer.up.T,
            p + "mlp.down_proj.weight": layer.down.T,
        }
        for proj in ("q", "k", "v"):  # Qwen2 initialises the q/k/v biases to zero
            state[p + f"self_attn.{proj}_proj.bias"] = np.zeros(getattr(layer, proj).shape[1], np.float32)
    missing, unexpected = twin.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=False,
    )
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    twin.tie_weights()
    return twin.eval()


def _transformers_logits(model: TinyLM, tokens: list[int]) -> np.ndarray:
    with torch.inference_mode():
        logits: np.ndarray = _transformers_twin(model)(input_ids=torch.tensor([tokens])).logits[0].float().numpy()
    return logits


# Attention scores a query block only against keys up to the block's last position, so
# block boundaries are where an off-by-one would show: a prompt that ends inside a
# block, one that fills its last block exactly, and one that starts a block with one row.
@pytest.mark.parametrize("length", [300, 2 * _QUERY_BLOCK, 2 * _QUERY_BLOCK + 1])
def test_numpy_model_matches_transformers_qwen2(length: int) -> None:
    model = build_model(VOCAB, seed=3, context_length=4096)
    tokens = TOKENS[:length]
    ours = model.forward(tokens, KVCache(model.config), all_logits=True)
    theirs = _transformers_logits(model, tokens)
    assert ours.shape == theirs.shape == (length, VOCAB)
    assert np.max(np.abs(ours - theirs)) < 1e-3
    # Teeth: a different seed's weights give clearly different logits.
    other = build_model(VOCAB, seed=4, context_length=4096)
    assert np.max(np.abs(other.forward(tokens, KVCache(other.config), all_logits=True) - theirs)) > 0.05


def test_chunk_prefilled_after_a_cached_prefix_matches_transformers() -> None:
    """A later chunk's blocks start mid-sequence (start > 0), as when a cached prefix is reused."""
    model = build_model(VOCAB, seed=3, context_length=4096)
    cache = KVCache(model.config)
    head = model.forward(TOKENS[:100], cache, all_logits=True)
    tail = model.forward(TOKENS[100:], cache, all_logits=True)  # 413 rows: a full block and a partial one
    theirs = _transformers_logits(model, TOKENS)
    assert np.max(np.abs(np.concatenate([head, tail]) - theirs)) < 1e-3


def test_cached_decode_equals_one_pass() -> None:
    model = build_model(VOCAB, seed=3, context_length=4096)
    full = model.forward(TOKENS, KVCache(model.config), all_logits=True)
    cache = KVCache(model.config)
    # Prefill longer than one attention block, then token by token, as the server decodes.
    stepwise = [model.forward(TOKENS[:280], cache)]
    stepwise += [model.forward([t], cache) for t in TOKENS[280:]]
    assert cache.length == len(TOKENS)
    assert np.max(np.abs(np.stack(stepwise) - full[279:])) < 1e-4


def test_weights_are_a_function_of_seed_and_vocabulary() -> None:
    a, b = build_model(VOCAB, seed=5, context_length=4096), build_model(VOCAB, seed=5, context_length=4096)
    assert np.array_equal(a.embed, b.embed)
    assert all(np.array_equal(x.q, y.q) and np.array_equal(x.down, y.down) for x, y in zip(a.layers, b.layers))
