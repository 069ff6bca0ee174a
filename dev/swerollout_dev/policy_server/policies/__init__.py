"""Pluggable policies: a Protocol plus a name -> import-path registry.

A policy turns a prompt (token ids) into a token-by-token generation. The
server's engine owns everything around it (stop conditions, max_new_tokens,
aborts, pauses, faults), so a policy only answers "what is the next token and
its logprob". A new policy is one module and one line in POLICIES.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from swerollout_dev.policy_server.errors import PolicyConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerollout_dev.policy_server.chat_format import ChatFormat


@dataclass(frozen=True)
class TokenSample:
    token_id: int
    logprob: float


@dataclass(frozen=True)
class SamplingConfig:
    """What a policy needs from the request's sampling_params (already validated)."""

    temperature: float
    top_p: float
    top_k: int
    seed: int


class Generation(Protocol):
    def next_token(self) -> TokenSample | None:
        """Sample one more token; None when the policy has nothing more to say."""
        ...


class Policy(Protocol):
    name: str
    offload: bool
    """next_token does heavy compute: the engine runs it in a worker thread."""

    def start(self, input_ids: list[int], sampling: SamplingConfig) -> Generation:
        """Begin generating a continuation of input_ids (the full context)."""
        ...


@runtime_checkable
class ReusesPrefix(Protocol):
    """A generation that may start from cached KV instead of prefilling all of its input."""

    reused_tokens: int
    """Input positions that came from the cache (SGLang's ``meta_info.cached_tokens``)."""


@runtime_checkable
class PrefixCaching(Protocol):
    """A policy that reuses the KV of earlier requests (as SGLang's radix cache does)."""

    def flush_cache(self) -> None:
        """Forget every cached prefix: what SGLang's /flush_cache and weight updates do."""
        ...


@dataclass(frozen=True)
class PolicyContext:
    """What every policy factory receives."""

    tokenizer: PreTrainedTokenizerBase
    chat_format: ChatFormat
    tasks_file: Path | None
    seed: int
    context_length: int
    oracle_ledger: int = 0
    """The oracle's ledger turns before its fix (ServerSettings.oracle_ledger)."""


class PolicyFactory(Protocol):
    def __call__(self, context: PolicyContext) -> Policy: ...


# name -> "module:factory". Imported lazily: only the policy a server runs is loaded.
POLICIES: dict[str, str] = {
    "tiny-lm": "swerollout_dev.policy_server.policies.tiny_lm:TinyLMPolicy",
    "oracle": "swerollout_dev.policy_server.policies.scripted:OraclePolicy",
    "null": "swerollout_dev.policy_server.policies.scripted:NullPolicy",
}


def policy_names() -> list[str]:
    return sorted(POLICIES)


def load_policy(name: str, context: PolicyContext) -> Policy:
    target = POLICIES.get(name)
    if target is None:
        raise PolicyConfigError(f"unknown policy {name!r}; valid policies: {', '.join(policy_names())}")
    module_name, _, attribute = target.partition(":")
    factory: PolicyFactory = getattr(importlib.import_module(module_name), attribute)
    return factory(context)
