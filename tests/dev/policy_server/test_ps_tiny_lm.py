"""tiny-lm is Qwen2: the numpy model's logits equal transformers' Qwen2ForCausalLM with the same weights.

The stand-in runs on numpy so that `dev up` costs no torch. This test is where the
architecture is held to the real implementation: every weight of the numpy model is
copied into a `Qwen2ForCausalLM` built from the matching `Qwen2Config`, and both score
the same token list. It also checks that the KV-cached decode the server uses equals
an uncached pass, and that starting a request from the prefix cache (the KV of an
earlier request with the same first tokens) samples what a full prefill samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from swerollout_dev.policy_server.chat_format import ChatFormat
from swerollout_dev.policy_server.policies import PolicyContext, SamplingConfig, TokenSample
from swerollout_dev.policy_server.policies.prefix_cache import PrefixCache
from swerollout_dev.policy_server.policies.tiny_lm import (
    _QUERY_BLOCK,
    KVCache,
    TinyLM,
    TinyLMGeneration,
    TinyLMPolicy,
    build_model,
)

VOCAB = 512
TOKENS = [int(t) for t in np.random.default_rng(7).integers(0, VOCAB, size=2 * _QUERY_BLOCK + 1)]


def _transformers_twin(model: TinyLM) -> Qwen2ForCausalLM:
    c = model.config
    config = Qwen2Config(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        max_position_embeddings=c.context_length,
        rope_theta=c.rope_theta,
        rms_norm_eps=c.rms_norm_eps,
        tie_word_embeddings=True,
        hidden_act="silu",
    )
    config._attn_implementation = "eager"
    twin = Qwen2ForCausalLM(config)
    state = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        # torch Linear stores [out, in]; the numpy model multiplies x @ W with W [in, out].
        state |= {
            p + "input_layernorm.weight": layer.input_norm,
            p + "post_attention_layernorm.weight": layer.post_norm,
            p + "self_attn.q_proj.weight": layer.q.T,
            p + "self_attn.k_proj.weight": layer.k.T,
            p + "self_attn.v_proj.weight": layer.v.T,
            p + "self_attn.o_proj.weight": layer.o.T,
            p + "mlp.gate_proj.weight": layer.gate.T,
            p + "mlp.up_proj.weight": layer.up.T,
            p + "mlp.down_proj.weight": layer.down.T,
        }
        for proj in ("q", "k", "v"):  # Qwen2 initialises the q/k/v biases to zero
            state[p + f"self_attn.{proj}_proj.bias"] = np.zeros(getattr(layer, proj).shape[1], np.float32)
    missing, unexpected = twin.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()},
        strict=False,
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


# ---- prefix cache: a request starts from the KV of an earlier request sharing its first tokens

# Reused KV was computed in other chunk shapes than a full prefill would use, so logits
# agree to float rounding (about 1e-6), not bit for bit; sampled tokens are identical.
REUSE_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def context(tokenizer: Any) -> PolicyContext:
    return PolicyContext(
        tokenizer=tokenizer,
        chat_format=ChatFormat.from_tokenizer(tokenizer),
        tasks_file=None,
        seed=0,
        context_length=32768,
    )


def _turn(
    policy: TinyLMPolicy,
    input_ids: list[int],
    seed: int,
    steps: int = 12,
) -> tuple[TinyLMGeneration, list[TokenSample]]:
    generation = policy.start(input_ids, SamplingConfig(temperature=1.0, top_p=1.0, top_k=-1, seed=seed))
    samples = [generation.next_token() for _ in range(steps)]
    assert all(s is not None for s in samples)
    return generation, [s for s in samples if s is not None]


def _same_samples(ours: list[TokenSample], theirs: list[TokenSample]) -> bool:
    return [s.token_id for s in ours] == [s.token_id for s in theirs] and all(
        abs(a.logprob - b.logprob) < REUSE_TOLERANCE for a, b in zip(ours, theirs, strict=True)
    )


def test_a_conversation_samples_the_same_with_and_without_prefix_reuse(context: PolicyContext) -> None:
    reusing, prefilling = TinyLMPolicy(context), TinyLMPolicy(context, prefix_entries=0)
    rng = np.random.default_rng(11)
    conversation = [int(t) for t in rng.integers(0, 5000, size=300)]
    previous = 0  # positions the previous turn's request ended with
    for turn in range(4):
        ours, our_samples = _turn(reusing, conversation, seed=turn)
        theirs, their_samples = _turn(prefilling, conversation, seed=turn)
        assert _same_samples(our_samples, their_samples), turn
        assert ours._next_logits is not None and theirs._next_logits is not None
        assert np.max(np.abs(ours._next_logits - theirs._next_logits)) < REUSE_TOLERANCE
        assert theirs.reused_tokens == 0
        # All of the previous turn but its last sampled token (never fed) is reused;
        # 30 rows stay to prefill, so the cached and the new part meet inside one block.
        assert ours.reused_tokens == (0 if turn == 0 else previous - 1)
        output = [s.token_id for s in our_samples]
        previous = len(conversation) + len(output)
        conversation = conversation + output + [int(t) for t in rng.integers(0, 5000, size=30)]


def test_requests_sharing_only_a_prompt_reuse_the_prompt(context: PolicyContext) -> None:
    """A group of samples of one prompt (GRPO): the second request matches the first's prompt, not its output."""
    reusing, prefilling = TinyLMPolicy(context), TinyLMPolicy(context, prefix_entries=0)
    prompt = [int(t) for t in np.random.default_rng(12).integers(0, 5000, size=200)]
    _turn(reusing, prompt, seed=1)
    second, samples = _turn(reusing, prompt, seed=2)
    assert second.reused_tokens == len(prompt) - 1
    assert _same_samples(samples, _turn(prefilling, prompt, seed=2)[1])


def test_a_weight_update_between_requests_drops_the_old_weights_kv(context: PolicyContext) -> None:
    reusing, prefilling = TinyLMPolicy(context), TinyLMPolicy(context, prefix_entries=0)
    conversation = [int(t) for t in np.random.default_rng(13).integers(0, 5000, size=300)]
    _, first = _turn(reusing, conversation, seed=1)
    conversation += [s.token_id for s in first] + [5, 6, 7]
    old_weights = _turn(prefilling, conversation, seed=2)[1]
    updated = build_model(len(context.tokenizer), seed=99, context_length=context.context_length)
    reusing.load_weights(updated)
    prefilling.load_weights(updated)
    after, samples = _turn(reusing, conversation, seed=2)
    assert after.reused_tokens == 0
    assert _same_samples(samples, _turn(prefilling, conversation, seed=2)[1])
    assert not _same_samples(samples, old_weights)  # teeth: the old weights' KV would have shown


def test_prefix_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    model = build_model(VOCAB, seed=3, context_length=4096)
    prefixes = PrefixCache(max_entries=2, max_positions=700, min_positions=64)
    prompts = [[i, *TOKENS[:199]] for i in range(3)]  # three conversations differing from the first token

    def prefill(owner: object, tokens: list[int]) -> None:
        cache = KVCache(model.config)
        model.forward(tokens, cache)
        prefixes.keep(owner, model, tokens, cache)

    for i, prompt in enumerate(prompts):
        prefill(i, prompt)
    assert len(prefixes) == 2
    assert prefixes.take(model, prompts[0] + [1]) is None  # the oldest went for the third
    reused = prefixes.take(model, prompts[2] + [1])
    assert reused is not None and reused.length == 200
    assert len(prefixes) == 1  # taken whole: its taker's own entry will hold it and more
    prefill("long", TOKENS[:513])  # 200 + 513 positions is over the bound: the older entry goes
    assert len(prefixes) == 1 and prefixes.take(model, prompts[1] + [1]) is None
    prefill("probe", [1])  # too short to be worth an entry
    assert len(prefixes) == 1
    assert prefixes.take(build_model(VOCAB, seed=4, context_length=4096), TOKENS) is None  # other weights
