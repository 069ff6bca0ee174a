"""smg's (SGLang's gateway, formerly sgl-router) control routes, as smg 1.13 answers them.

What swerollout reads of a gateway: its worker list (``GET /workers``), the RL control
plane's worker list (``GET /v1/rl/workers``, served with ``--enable-rl``) and the answer of
one RL fan-out (``/v1/rl/engine/<route>?selector=...``: one engine call per worker the
selector matches). swerollout/fleet.py uses them (docs/sglang-protocol.md, "Fleets").

Every model ignores unknown keys: smg adds fields between releases, and a new one must not
break a running fleet.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ROUTING_KEY_HEADER = "x-smg-routing-key"
"""The header smg routes a request on when it carries one (its default
``--routing-key-headers``): every request with the same value goes to the same engine."""

ENGINE_SELECTOR = "worker_type in (regular,prefill,decode)"
"""An RL fan-out selector that matches every engine smg knows (a fan-out needs one)."""


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class GatewayWorker(_Lenient):
    """One entry of ``GET /workers``."""

    id: str
    url: str
    """The engine's base URL (what smg sends the worker's requests to)."""
    worker_type: str | None = None
    is_healthy: bool | None = None


class GatewayWorkers(_Lenient):
    """``GET /workers``."""

    workers: list[GatewayWorker]
    total: int | None = None


class RlWorker(_Lenient):
    """One entry of ``GET /v1/rl/workers``."""

    id: str
    url: str
    control_url: str | None = None
    """Where smg sends this worker's control calls; None for a worker without one."""
    worker_type: str | None = None
    health: str | None = None


class RlWorkers(_Lenient):
    """``GET /v1/rl/workers``."""

    protocol_version: int | None = None
    workers: list[RlWorker]


class FanoutCall(_Lenient):
    """One engine's answer inside a fan-out."""

    url: str = ""
    status: int
    latency_ms: int | None = None
    body: Any = None


class FanoutFailure(_Lenient):
    """One engine a fan-out did not reach, or that answered an error."""

    worker_id: str = ""
    url: str = ""
    status: int | None = None
    error: str = ""
    message: str = ""


class FanoutAnswer(_Lenient):
    """``/v1/rl/engine/<route>?selector=...``: 200 when every engine answered 2xx, else 207."""

    results: dict[str, FanoutCall] = Field(default_factory=dict)
    failed: list[FanoutFailure] = Field(default_factory=list)
    total: int = 0
    succeeded: int = 0
