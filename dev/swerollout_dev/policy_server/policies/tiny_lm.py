"""`tiny-lm`: a tiny randomly initialised Qwen2-architecture transformer, sampled for real on CPU.

The model is built in code (no weights are downloaded) and runs on numpy alone, so
the stand-in costs no torch or CUDA wheels. Its architecture is Qwen2's: token
embedding, per layer RMSNorm -> grouped-query attention with rotary positions ->
residual -> RMSNorm -> SwiGLU MLP -> residual, a final RMSNorm and a tied output
head. ``tests/dev/policy_server/test_ps_tiny_lm.py`` loads the same weights
into transformers' ``Qwen2ForCausalLM`` and checks the logits agree, so this is the
real architecture, not an approximation of one.

Weights are drawn from a fixed seed, so every process that builds the model with the
same seed and vocabulary gets bit-identical weights. Its text is gibberish; what it is
for is real token-level behaviour: sampling, seeds, stop tokens, logprobs and aborts
that land between two decode steps of a KV-cached generation.

Logprobs (``output_token_logprobs``): for each sampled token, its log-probability
under ``log_softmax(logits / temperature)`` over the full vocabulary, computed in
float32 from the logits of that decode step, BEFORE top-k / top-p truncation (this is
SGLang's default). With temperature 0 (greedy) the raw logits are used, i.e.
``log_softmax(logits)``. So teacher-forcing the final token list through the same
model reproduces the recorded values up to float rounding of the KV cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from swerollout_dev.policy_server.policies import PolicyContext, SamplingConfig, TokenSample
from swerollout_dev.policy_server.policies.prefix_cache import PrefixCache

Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TinyConfig:
    """Two layers, 64 wide: a decode step costs a few ms."""

    vocab_size: int
    context_length: int
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    # Wider than the usual 0.02 so the next-token distribution is not nearly uniform
    # (sampling settings then visibly change what is sampled).
    initializer_range: float = 0.05

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class Layer:
    input_norm: Array
    q: Array  # [hidden, heads * head_dim]
    k: Array  # [hidden, kv_heads * head_dim]
    v: Array
    o: Array  # [heads * head_dim, hidden]
    post_norm: Array
    gate: Array  # [hidden, intermediate]
    up: Array
    down: Array  # [intermediate, hidden]


@dataclass(frozen=True)
class TinyLM:
    config: TinyConfig
    embed: Array  # [vocab, hidden]; also the output head (tied)
    layers: tuple[Layer, ...]
    final_norm: Array
    inv_freq: Array = field(repr=False)

    def forward(self, token_ids: list[int], cache: KVCache, *, all_logits: bool = False) -> Array:
        """Run ``token_ids`` after what ``cache`` holds; return the last position's logits (or every position's)."""
        c = self.config
        start = cache.length
        positions = np.arange(start, start + len(token_ids), dtype=np.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        cos = np.cos(np.concatenate([angles, angles], axis=-1)).astype(np.float32)
        sin = np.sin(np.concatenate([angles, angles], axis=-1)).astype(np.float32)
        x = self.embed[np.asarray(token_ids)]
        for index, layer in enumerate(self.layers):
            h = _rms_norm(x, layer.input_norm, c.rms_norm_eps)
            q = _rope((h @ layer.q).reshape(len(token_ids), c.num_heads, c.head_dim), cos, sin)
            k = _rope((h @ layer.k).reshape(len(token_ids), c.num_kv_heads, c.head_dim), cos, sin)
            v = (h @ layer.v).reshape(len(token_ids), c.num_kv_heads, c.head_dim)
            keys, values = cache.append(index, k, v)
            x = x + _attention(q, keys, values, start, c) @ layer.o
            h = _rms_norm(x, layer.post_norm, c.rms_norm_eps)
            x = x + (_silu(h @ layer.gate) * (h @ layer.up)) @ layer.down
        cache.length = start + len(token_ids)
        x = _rms_norm(x if all_logits else x[-1:], self.final_norm, c.rms_norm_eps)
        logits: Array = x @ self.embed.T
        return logits if all_logits else logits[0]


class KVCache:
    """Keys and values per layer: ``[positions, kv_heads, head_dim]``.

    An append makes new arrays and never writes into old ones, so caches can share
    arrays: ``prefix`` is free, and the prefix cache's snapshots stay valid.
    """

    def __init__(self, config: TinyConfig) -> None:
        self.length = 0
        self._keys: list[Array] = [
            np.empty((0, config.num_kv_heads, config.head_dim), np.float32) for _ in range(config.num_layers)
        ]
        self._values: list[Array] = list(self._keys)

    def append(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        self._keys[layer] = np.concatenate([self._keys[layer], k])
        self._values[layer] = np.concatenate([self._values[layer], v])
        return self._keys[layer], self._values[layer]

    def prefix(self, length: int) -> KVCache:
        """A cache of this one's first ``length`` positions, sharing its arrays."""
        if not 0 <= length <= self.length:
            raise ValueError(f"prefix length {length} is outside this cache's 0..{self.length} positions")
        other = KVCache.__new__(KVCache)
        other.length = length
        other._keys = [k[:length] for k in self._keys]
        other._values = [v[:length] for v in self._values]
        return other


def _rms_norm(x: Array, weight: Array, eps: float) -> Array:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    out: Array = (x / np.sqrt(variance + eps)) * weight
    return out


def _rope(x: Array, cos: Array, sin: Array) -> Array:
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    out: Array = (x * cos[:, None, :] + rotated * sin[:, None, :]).astype(np.float32, copy=False)
    return out


def _silu(x: Array) -> Array:
    out: Array = (x / (1.0 + np.exp(-x))).astype(np.float32, copy=False)
    return out


# Query rows per attention block: bounds prefill memory to heads x block x context floats
# (a 32k-token prompt needs 4 x 256 x 32k x 4 B = 128 MiB, not 16 GiB).
_QUERY_BLOCK = 256


def _attention(q: Array, keys: Array, values: Array, start: int, c: TinyConfig) -> Array:
    """Causal grouped-query attention of new queries (at ``start``...) over all cached positions.

    A block of queries is scored only against keys up to its own last position: the
    later ones are masked for every row of the block, and scoring them was most of a
    long prefill's cost. Inside that window only the block's own diagonal square has
    future keys, so only that square is masked.
    """
    group = c.num_heads // c.num_kv_heads
    n, kv, dim = q.shape[0], c.num_kv_heads, c.head_dim
    # Heads that share a kv head are stacked as rows of one matmul, so keys and values
    # are never repeated per head. 1/sqrt(head_dim) is applied to the (fewer) queries.
    grouped = (q * np.float32(1.0 / np.sqrt(dim))).reshape(n, kv, group, dim).transpose(1, 2, 0, 3)
    k = keys.transpose(1, 2, 0)  # [kv_heads, head_dim, positions]
    v = values.transpose(1, 0, 2)  # [kv_heads, positions, head_dim]
    out = np.empty((n, c.num_heads * dim), np.float32)
    for lo in range(0, n, _QUERY_BLOCK):
        hi = min(lo + _QUERY_BLOCK, n)
        rows, visible = hi - lo, start + hi
        block_q = grouped[:, :, lo:hi].reshape(kv, group * rows, dim)
        scores = (block_q @ k[:, :, :visible]).reshape(kv, group, rows, visible)
        # Row i sits at position start + lo + i: of the block's own keys it sees 0..i.
        scores[..., visible - rows :][..., np.triu(np.ones((rows, rows), dtype=bool), 1)] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True)  # [kv, group, rows, 1]
        weighted = (scores.reshape(kv, group * rows, visible) @ v[:, :visible]).reshape(kv, group, rows, dim)
        out[lo:hi] = (weighted / total).transpose(2, 0, 1, 3).reshape(rows, -1)
    return out


def build_model(vocab_size: int, *, seed: int, context_length: int) -> TinyLM:
    """The tiny model, deterministic in (vocab_size, seed, context_length): Qwen2's initialisation."""
    c = TinyConfig(vocab_size=vocab_size, context_length=context_length)
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> Array:
        return rng.normal(0.0, c.initializer_range, size=shape).astype(np.float32)

    ones = np.ones(c.hidden_size, np.float32)
    embed = normal(vocab_size, c.hidden_size)
    layers = tuple(
        Layer(
            input_norm=ones,
            q=normal(c.hidden_size, c.num_heads * c.head_dim),
            k=normal(c.hidden_size, c.num_kv_heads * c.head_dim),
            v=normal(c.hidden_size, c.num_kv_heads * c.head_dim),
            o=normal(c.num_heads * c.head_dim, c.hidden_size),
            post_norm=ones,
            gate=normal(c.hidden_size, c.intermediate_size),
            up=normal(c.hidden_size, c.intermediate_size),
            down=normal(c.intermediate_size, c.hidden_size),
        )
        for _ in range(c.num_layers)
    )
    inv_freq = (1.0 / (c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float32) / c.head_dim))).astype(np.float32)
    return TinyLM(config=c, embed=embed, layers=layers, final_norm=ones, inv_freq=inv_freq)


def log_softmax(logits: Array) -> Array:
    shifted = logits - logits.max()
    out: Array = shifted - np.log(np.exp(shifted).sum())
    return out


def sample_token(logits: Array, sampling: SamplingConfig, rng: np.random.Generator) -> TokenSample:
    """Sample from one position's logits; the logprob is documented in the module docstring."""
    logits = logits.astype(np.float32)
    if sampling.temperature <= 0.0:
        logprobs = log_softmax(logits)
        token = int(np.argmax(logits))
        return TokenSample(token_id=token, logprob=float(logprobs[token]))
    logprobs = log_softmax(logits / np.float32(sampling.temperature))
    probs = np.exp(logprobs.astype(np.float64))
    if 0 < sampling.top_k < probs.size:
        kth = np.partition(probs, probs.size - sampling.top_k)[probs.size - sampling.top_k]
        probs = np.where(probs >= kth, probs, 0.0)
    if sampling.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        sorted_probs = probs[order]
        before = np.cumsum(sorted_probs) - sorted_probs
        # Keep every token whose predecessors have not yet reached top_p (so at least one).
        kept = np.where(before < sampling.top_p * sorted_probs.sum(), sorted_probs, 0.0)
        probs = np.zeros_like(probs)
        probs[order] = kept
    token = int(rng.choice(probs.size, p=probs / probs.sum()))
    return TokenSample(token_id=token, logprob=float(logprobs[token]))


@dataclass(eq=False)  # compared and hashed by identity: it keys its prefix-cache entry
class TinyLMGeneration:
    """One request's decode state: a KV cache and the logits of the next position."""

    model: TinyLM
    lock: threading.Lock
    input_ids: list[int]
    sampling: SamplingConfig
    prefixes: PrefixCache | None = None
    reused_tokens: int = 0
    """Input positions whose KV came from the prefix cache instead of a prefill."""
    _tokens: list[int] = field(default_factory=list)
    """The tokens whose KV ``_cache`` holds (the input, then each fed output token)."""
    _cache: KVCache | None = None
    _next_logits: Array | None = None
    _pending: int | None = None
    _rng: np.random.Generator | None = None

    def next_token(self) -> TokenSample | None:
        with self.lock:
            if self._cache is None:
                self._rng = np.random.default_rng(self.sampling.seed)
                reused = self.prefixes.take(self.model, self.input_ids) if self.prefixes is not None else None
                self._cache = reused if reused is not None else KVCache(self.model.config)
                self.reused_tokens = self._cache.length
                self._next_logits = self.model.forward(self.input_ids[self.reused_tokens :], self._cache)
                self._tokens = list(self.input_ids)
            elif self._pending is not None:
                # The previous token is fed lazily, so an abort right after sampling it
                # costs no extra decode step.
                self._next_logits = self.model.forward([self._pending], self._cache)
                self._tokens.append(self._pending)
            if self.prefixes is not None:
                # After every step, so that whatever ends this request (stop, length,
                # abort) the next turn finds all of it.
                self.prefixes.keep(self, self.model, self._tokens, self._cache)
            assert self._next_logits is not None and self._rng is not None
            sample = sample_token(self._next_logits, self.sampling, self._rng)
            self._pending = sample.token_id
        return sample


# A 32k-token conversation's KV is 16 MiB (2 layers x 2 x 2 kv heads x 16 dims x 4 B per
# position): the prefix cache holds up to 8 conversations of up to 128k positions (64 MiB).
PREFIX_ENTRIES = 8
PREFIX_POSITIONS = 131_072
PREFIX_MIN_POSITIONS = 64


class TinyLMPolicy:
    name = "tiny-lm"
    offload = True

    def __init__(self, context: PolicyContext, *, prefix_entries: int = PREFIX_ENTRIES) -> None:
        """``prefix_entries=0`` turns the prefix cache off (every request prefills all of its input)."""
        self.vocab_size = len(context.tokenizer)
        self.model = build_model(self.vocab_size, seed=context.seed, context_length=context.context_length)
        self._lock = threading.Lock()
        self._prefixes = (
            PrefixCache(max_entries=prefix_entries, max_positions=PREFIX_POSITIONS, min_positions=PREFIX_MIN_POSITIONS)
            if prefix_entries > 0
            else None
        )

    def load_weights(self, model: TinyLM) -> None:
        """A weight update: later requests use ``model``, and no KV computed with the old weights."""
        with self._lock:
            self.model = model
            if self._prefixes is not None:
                self._prefixes.clear()

    def flush_cache(self) -> None:
        with self._lock:
            if self._prefixes is not None:
                self._prefixes.clear()

    def start(self, input_ids: list[int], sampling: SamplingConfig) -> TinyLMGeneration:
        return TinyLMGeneration(
            model=self.model,
            lock=self._lock,
            input_ids=list(input_ids),
            sampling=sampling,
            prefixes=self._prefixes,
        )
