"""Configuration of one policy server (CLI flags and launch() keyword arguments map onto it)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swerollout_dev.policy_server.policies import POLICIES, policy_names
from swerollout_dev.policy_server.wire import FaultSettings

DEFAULT_TOKENIZER = "qwen-2.5"
DEFAULT_PORT = 30000  # SGLang's default port


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = "oracle"
    """Policy name: tiny-lm, oracle or null (see policies.POLICIES)."""
    tasks: Path | None = None
    """JSONL of SWE-bench instances with their gold `patch` (required by oracle)."""
    tokenizer: str = DEFAULT_TOKENIZER
    """Bundled tokenizer name or tokenizer directory (swerollout.tokenizers.load_tokenizer)."""
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    """TCP port; 0 picks a free one (the printed URL says which)."""
    weight_version: str = Field(default="default", min_length=1)
    """Reported in meta_info.weight_version until /update_weight_version changes it."""
    seed: int = 0
    """Seeds the tiny-lm weights, the per-request seeds when none is given, and the fault dice."""
    context_length: int = Field(default=32768, ge=16)
    """Longest prompt + max_new_tokens a request may ask for (tokens)."""
    max_chat_tokens: int = Field(default=4096, ge=1)
    """max_tokens of a chat completion that sets none (capped by the remaining context)."""
    faults: FaultSettings = Field(default_factory=FaultSettings)
    oracle_ledger: int = Field(default=0, ge=0, le=64)
    """oracle: first N bash turns, turn i appending `step i` to LEDGER_FILE in the repository,
    then the fix: the final patch shows how many times each command ran (chaos tests)."""
    api_key: str | None = Field(default=None, min_length=1)
    """SGLang's --api-key: every route but /health* needs ``Authorization: Bearer <key>``."""
    admin_api_key: str | None = Field(default=None, min_length=1)
    """SGLang's --admin-api-key: the admin routes (aborts, pause/continue, weight updates,
    flush_cache, fault injection) need ``Authorization: Bearer <key>`` (see auth.py)."""

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"unknown policy {value!r}; valid policies: {', '.join(policy_names())}")
        return value

    @model_validator(mode="after")
    def _oracle_has_tasks(self) -> ServerSettings:
        # Checked here, before the (slow) tokenizer load, so a bad command line fails at once.
        if self.policy == "oracle" and self.tasks is None:
            raise ValueError("the oracle policy needs --tasks FILE (JSONL of SWE-bench instances with `patch`)")
        if self.tasks is not None and not self.tasks.is_file():
            raise ValueError(f"tasks file {self.tasks} does not exist")
        return self

    @property
    def model_name(self) -> str:
        """Served model name (/get_model_info model_path, /v1/models, chat `model`)."""
        return f"swerollout-{self.policy}"
