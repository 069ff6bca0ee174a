"""The pod -> runner contract: what the operator's pod spec puts in the runner's environment.

The operator renders it with `RunnerEnv.to_env()` and the runner reads it back with
`RunnerEnv.from_environ()`, so the variable names exist once. Credentials travel as
file paths (Secret mounts in the runner container only), never as values.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ENV_NAMES", "POD_LOOPBACK_ENV", "InferenceKeys", "RunnerEnv", "RunnerEnvError", "RunnerRole"]

POD_LOOPBACK_ENV = "SWEROLLOUT_POD_LOOPBACK"
"""Set by the embedded node agent, not by the pod spec: the pod's own loopback address."""


class RunnerRole(StrEnum):
    ROLLOUT = "rollout"
    """Run the agent (and resume it) against the policy's inference server."""
    EVAL = "eval"
    """Apply the patch in a fresh sandbox, run the eval script and grade it."""


class RunnerEnvError(ValueError):
    """The runner's environment is incomplete or malformed: the pod spec is wrong, not the task."""


class RunnerEnv(BaseModel):
    """Each field is one environment variable, named in `ENV_NAMES`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: RunnerRole = RunnerRole.ROLLOUT
    ingest_url: str = Field(min_length=1)
    """The operator's ingest API, as the runner reaches it."""
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)
    attempt: int = Field(default=1, ge=1)
    ingest_token_file: str = Field(min_length=1)
    swerex_url: str = Field(min_length=1)
    """The sandbox's swerex server; it listens on the pod's loopback."""
    swerex_token_file: str = Field(min_length=1)
    inference_api_key_file: str | None = None
    """The inference server's API key (spec.inference.apiKeySecretRef), when the spec names one."""
    inference_admin_key_file: str | None = None
    """The inference server's admin key (spec.inference.adminKeySecretRef), when the spec names one."""
    tokenizer: str | None = Field(default=None, min_length=1)
    """spec.inference.tokenizer, for a rollout runner to load while its sandbox starts (the
    assignment's spec decides which tokenizer the run uses; this only starts the load early)."""
    pod_name: str | None = None
    """From the downward API (`metadata.name`), for log lines and Events."""
    pod_loopback: str | None = None

    def to_env(self) -> list[dict[str, Any]]:
        """Container `env` entries; the pod name always comes from the downward API."""
        values = self.model_dump(mode="json", exclude={"pod_name", "pod_loopback"}, exclude_none=True)
        env: list[dict[str, Any]] = [{"name": ENV_NAMES[key], "value": str(value)} for key, value in values.items()]
        env.append({"name": ENV_NAMES["pod_name"], "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        return env

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunnerEnv:
        values = {field: environ[var] for field, var in ENV_NAMES.items() if environ.get(var, "") != ""}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            variable = ENV_NAMES.get(field, "environment")
            raise RunnerEnvError(
                f"environment variable {variable}: {first['msg']} (the runner's pod spec sets it; "
                "see RunnerEnv in swerollout/wire/runner_env.py)"
            ) from exc

    def sandbox_url(self) -> str:
        """The swerex URL on this pod's own loopback address when the node gives it one."""
        if not self.pod_loopback:
            return self.swerex_url
        return self.swerex_url.replace("127.0.0.1", self.pod_loopback).replace("localhost", self.pod_loopback)

    def read_ingest_token(self) -> str:
        return _read_secret(self.ingest_token_file, "SWEROLLOUT_INGEST_TOKEN_FILE")

    def read_swerex_token(self) -> str:
        return _read_secret(self.swerex_token_file, "SWEREX_AUTH_TOKEN_FILE")

    def read_inference_keys(self) -> InferenceKeys:
        """The inference server's keys the pod spec mounted (none when the spec names none)."""
        return InferenceKeys(
            api_key=_read_secret(self.inference_api_key_file, ENV_NAMES["inference_api_key_file"])
            if self.inference_api_key_file
            else None,
            admin_key=_read_secret(self.inference_admin_key_file, ENV_NAMES["inference_admin_key_file"])
            if self.inference_admin_key_file
            else None,
        )


class InferenceKeys(BaseModel):
    """Bearer keys of the inference server: `api_key` for its routes, `admin_key` for aborts."""

    model_config = ConfigDict(frozen=True)

    api_key: str | None = None
    admin_key: str | None = None

    def __repr__(self) -> str:  # never print a key
        return (
            f"InferenceKeys(api_key={'set' if self.api_key else None}, admin_key={'set' if self.admin_key else None})"
        )

    __str__ = __repr__


ENV_NAMES: dict[str, str] = {
    "role": "SWEROLLOUT_ROLE",
    "ingest_url": "SWEROLLOUT_INGEST_URL",
    "namespace": "SWEROLLOUT_NAMESPACE",
    "name": "SWEROLLOUT_NAME",
    "uid": "SWEROLLOUT_UID",
    "attempt": "SWEROLLOUT_ATTEMPT",
    "ingest_token_file": "SWEROLLOUT_INGEST_TOKEN_FILE",
    "swerex_url": "SWEREX_URL",
    "swerex_token_file": "SWEREX_AUTH_TOKEN_FILE",
    "inference_api_key_file": "SWEROLLOUT_INFERENCE_API_KEY_FILE",
    "inference_admin_key_file": "SWEROLLOUT_INFERENCE_ADMIN_KEY_FILE",
    "tokenizer": "SWEROLLOUT_TOKENIZER",
    "pod_name": "SWEROLLOUT_POD_NAME",
    "pod_loopback": POD_LOOPBACK_ENV,
}
"""Field -> environment variable: the one place the names are spelled."""


def _read_secret(path: str, variable: str) -> str:
    try:
        value = Path(path).read_text().strip()
    except OSError as exc:
        raise RunnerEnvError(f"{variable}={path}: cannot read it ({exc.strerror}); is the Secret mounted?") from exc
    if not value:
        raise RunnerEnvError(f"{variable}={path} is empty; the rollout's Secret is incomplete")
    return value
