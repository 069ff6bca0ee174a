"""What every trainer adapter is told: how to reach the cluster and the result store,
which SGLang servers the rollout pods call, and the rollout spec around each task.

Frameworks hand it over in their own config (verl's Hydra config under ``swerollout:``,
AReaL's workflow kwargs, slime's and siiRL's args); :meth:`AdapterSettings.parse` turns
any mapping into this model and names the field on a mistake.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerollout.api.base import one_line
from swerollout.client import AsyncRolloutClient, ClientConfigError
from swerollout.client.naming import MAX_BATCH

INSTANCE_KEYS = ("instance", "extra_info.instance")
"""Where a dataset row carries its SWE-bench task, in the order they are tried."""


class AdapterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoints: list[str] = Field(min_length=1)
    """Base URLs of the trainer's SGLang servers, as the rollout pods reach them
    (``http://10.0.3.7:30000``); rollouts are spread over them by sample. An entry may be
    SGLang's gateway (smg) in front of many engines: ``[gateway]`` alone sends every rollout
    through it, which keeps each rollout on one engine by its routing key; aborts reach
    every engine behind each entry (docs/sglang-protocol.md, "Fleets")."""
    tokenizer: str
    """spec.inference.tokenizer: a bundled name (qwen-2.5, qwen-3, ...) or a tokenizer directory the runner has."""
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    store_url: str | None = None
    """The result store the operator writes to (file:// on a shared volume, s3://...)."""
    results_url: str | None = None
    """Or the operator's ingest URL, which serves results to a Kubernetes bearer token."""
    batch_prefix: str = Field(default="rl", min_length=1, max_length=16, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Batch names start with it (then a run id and the step)."""
    inference: dict[str, Any] = Field(default_factory=dict)
    """More spec.inference fields (maxContextTokens, returnRoutedExperts, requestTimeoutSeconds, ...)."""
    agent: dict[str, Any] = Field(default_factory=dict)
    """spec.agent (maxTurns, templates, ...)."""
    sandbox: dict[str, Any] = Field(default_factory=dict)
    reward: dict[str, Any] = Field(default_factory=dict)
    mode: str = "train"
    moe_layers: int | None = Field(default=None, ge=1)
    """MoE layers of the policy: splits each routing row into [layers, top_k] (returnRoutedExperts)."""
    timeout_seconds: float | None = Field(default=None, gt=0)
    """How long to wait for a rollout (None: as long as it takes)."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, where: str) -> AdapterSettings:
        """The settings from a framework's config mapping; ClientConfigError naming ``where``."""
        if raw is None:
            raise ClientConfigError(f"{where} is missing: set at least its endpoints and tokenizer (docs/trainers.md)")
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise ClientConfigError(f"{where} is not valid: {one_line(exc)}") from exc

    def connect(self) -> AsyncRolloutClient:
        """A client for the current event loop (the caller closes it)."""
        return AsyncRolloutClient.connect(
            self.kubeconfig,
            context=self.context,
            namespace=self.namespace,
            store_url=self.store_url,
            results_url=self.results_url,
        )

    def batch_name(self, *parts: str | int) -> str:
        name = "-".join([self.batch_prefix, *(str(p) for p in parts)])
        if len(name) > MAX_BATCH:
            raise ClientConfigError(f"batch name {name!r} is longer than {MAX_BATCH} characters; shorten batch_prefix")
        return name

    def inference_for(
        self,
        sample: int,
        *,
        sampling: Mapping[str, Any] | None = None,
        max_sampled_tokens: int | None = None,
        max_context_tokens: int | None = None,
    ) -> dict[str, Any]:
        """spec.inference for one sample: its server (spread by sample), the tokenizer,
        the trainer's sampling and length caps over the configured extras."""
        inference: dict[str, Any] = {**self.inference, "endpoint": self.endpoints[sample % len(self.endpoints)]}
        inference["tokenizer"] = self.tokenizer
        if sampling:
            inference["sampling"] = {**inference.get("sampling", {}), **sampling}
        if max_sampled_tokens is not None:
            inference["maxSampledTokens"] = max_sampled_tokens
        if max_context_tokens is not None:
            configured = inference.get("maxContextTokens")
            inference["maxContextTokens"] = (
                min(int(configured), max_context_tokens) if configured else max_context_tokens
            )
        return inference


def instance_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The SWE-bench task of a dataset row: its ``instance`` column, or ``extra_info.instance``
    (a mapping or its JSON text), as a published row or spec.instance; or the row itself
    when it is a published SWE-bench row (``instance_id`` and ``base_commit``)."""
    if "instance_id" in row and "base_commit" in row:
        return dict(row)
    for key in INSTANCE_KEYS:
        value: Any = row
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ClientConfigError(f"the row's {key} is not JSON: {exc}") from exc
        if not isinstance(value, Mapping):
            raise ClientConfigError(f"the row's {key} must be a mapping (a SWE-bench row), got {type(value).__name__}")
        return dict(value)
    raise ClientConfigError(
        f"the dataset row has no SWE-bench task: put the row (instance_id, repo, base_commit, problem_statement, ...) "
        f"in a column named one of {list(INSTANCE_KEYS)}; it has {sorted(row)}"
    )


# Keyed by the loop itself, weakly: a closed loop's id can be reused by the next loop, which
# would then be handed a client bound to a dead loop.
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncRolloutClient]] = (
    weakref.WeakKeyDictionary()
)


def shared_client(settings: AdapterSettings) -> AsyncRolloutClient:
    """One client (so one shared watch) per settings and event loop of a process: per-sample
    hooks (verl builds a new agent loop for every sample) all wait through it."""
    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    key = settings.model_dump_json()
    if key not in clients:
        clients[key] = settings.connect()
    return clients[key]
