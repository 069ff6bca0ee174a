"""The SGLang engines behind one inference endpoint, and reaching every one of them.

An endpoint is one SGLang engine, or smg (SGLang's gateway) in front of several. smg
sends each ``/generate`` to one engine (the same one for every request carrying the same
routing key, ``swerollout.wire.smg.ROUTING_KEY_HEADER``), but serves none of the routes an
abort or a pause needs (``/abort_request``, ``/ready``, ``/pause_generation``: smg 1.13
answers 404), so what must reach the engine holding a request goes to every engine:

- through smg's RL control plane (smg ``--enable-rl``): one fan-out call,
  ``/v1/rl/engine/<route>?selector=...``, which smg sends to each engine it knows;
- else to each engine smg lists at ``GET /workers``, directly (the caller must reach them);
- to the endpoint itself when it is an engine (it serves neither list).

An exact-rid ``/abort_request`` sent to every engine aborts the request where it runs and
nothing elsewhere (an engine answers an empty 200 for a rid it does not hold). This module is
the one home of that rule: the runner's client (agent_runner/policy/sglang.py), the trainer client's
batch abort and the trainers' fleet-wide pauses and weight updates use it
(docs/sglang-protocol.md, "Fleets").
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from swerollout.wire.smg import ENGINE_SELECTOR, FanoutAnswer, GatewayWorkers, RlWorkers

__all__ = ["EndpointKind", "EngineAnswer", "Fleet", "FleetError", "abort_all", "call_engines", "discover"]

DISCOVERY_TIMEOUT = 5.0
"""Seconds for one worker-list read."""


class EndpointKind(enum.Enum):
    ENGINE = "engine"
    """An SGLang engine (or anything that lists no workers): calls go to it."""
    GATEWAY = "gateway"
    """smg without its RL control plane: calls go to each engine of ``GET /workers``."""
    RL_GATEWAY = "rl-gateway"
    """smg with ``--enable-rl``: calls go through its fan-out."""


class FleetError(Exception):
    """An endpoint's worker list could not be read (transport error or timeout)."""


@dataclass(frozen=True)
class Fleet:
    """What stands behind one endpoint, as read at one moment."""

    endpoint: str
    kind: EndpointKind
    engines: tuple[str, ...]
    """The engines' base URLs (the endpoint itself for an engine)."""

    @property
    def listed_once(self) -> bool:
        """Whether this reading stays right: an engine is itself, and an RL gateway fans out
        to the engines it knows at the time of each call; a plain gateway's list changes."""
        return self.kind is not EndpointKind.GATEWAY


@dataclass(frozen=True)
class EngineAnswer:
    """One engine's answer to one call (``status`` None: it was not reached)."""

    engine: str
    status: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and self.status < 400


async def discover(
    http: httpx.AsyncClient,
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = DISCOVERY_TIMEOUT,
) -> Fleet:
    """Read what serves ``endpoint``: an RL gateway, a gateway or an engine.

    Only a 200 with smg's body makes it a gateway: an engine answers 404 (or 401 under
    ``--api-key``) for both lists. Raises FleetError when the endpoint cannot be reached."""
    base = endpoint.rstrip("/")
    rl = await _get(http, f"{base}/v1/rl/workers", headers, timeout)
    if rl is not None:
        try:
            listed = RlWorkers.model_validate_json(rl)
        except ValidationError:
            pass
        else:
            return Fleet(base, EndpointKind.RL_GATEWAY, tuple(w.url.rstrip("/") for w in listed.workers))
    plain = await _get(http, f"{base}/workers", headers, timeout)
    if plain is not None:
        try:
            workers = GatewayWorkers.model_validate_json(plain)
        except ValidationError:
            pass
        else:
            return Fleet(base, EndpointKind.GATEWAY, tuple(w.url.rstrip("/") for w in workers.workers))
    return Fleet(base, EndpointKind.ENGINE, (base,))


async def _get(http: httpx.AsyncClient, url: str, headers: Mapping[str, str] | None, timeout: float) -> bytes | None:
    try:
        response = await http.get(url, headers=dict(headers or {}), timeout=timeout)
    except httpx.TransportError as exc:
        raise FleetError(f"cannot read {url}: {exc!r}") from exc
    return response.content if response.status_code == 200 else None


async def call_engines(
    http: httpx.AsyncClient,
    fleet: Fleet,
    method: str,
    route: str,
    body: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float,
) -> list[EngineAnswer]:
    """Send one call (``route``: an engine route such as ``/abort_request``) to every engine
    of ``fleet``; one answer per engine. Never raises for an engine's failure: the answers say."""
    route = "/" + route.lstrip("/")
    send: dict[str, Any] = {"headers": dict(headers or {}), "timeout": timeout}
    if body is not None:
        send["json"] = body
    if fleet.kind is EndpointKind.RL_GATEWAY:
        return await _fan_out(http, fleet, method, route, send)

    async def one(engine: str) -> EngineAnswer:
        try:
            response = await http.request(method, f"{engine}{route}", **send)
        except httpx.TransportError as exc:
            return EngineAnswer(engine, None, repr(exc))
        return EngineAnswer(engine, response.status_code, None if response.is_success else _snippet(response))

    return list(await asyncio.gather(*(one(e) for e in fleet.engines)))


async def _fan_out(
    http: httpx.AsyncClient, fleet: Fleet, method: str, route: str, send: dict[str, Any]
) -> list[EngineAnswer]:
    url = f"{fleet.endpoint}/v1/rl/engine{route}"
    try:
        response = await http.request(method, url, params={"selector": ENGINE_SELECTOR}, **send)
    except httpx.TransportError as exc:
        return [EngineAnswer(fleet.endpoint, None, f"cannot reach {url}: {exc!r}")]
    if response.status_code in (200, 207):
        try:
            answer = FanoutAnswer.model_validate_json(response.content)
        except ValidationError:
            pass
        else:
            answers = [EngineAnswer(c.url.rstrip("/"), c.status) for c in answer.results.values()]
            reached = {a.engine for a in answers}
            for failure in answer.failed:
                if failure.url.rstrip("/") in reached:
                    continue  # an engine that answered an error: its status is above
                answers.append(EngineAnswer(failure.url.rstrip("/"), failure.status, failure.message or failure.error))
            return answers
    # The gateway itself refused (no engine matched, a bad key): no engine was reached.
    return [
        EngineAnswer(
            fleet.endpoint,
            response.status_code if response.status_code in (401, 403) else None,
            f"{url} answered HTTP {response.status_code}: {_snippet(response)}",
        )
    ]


async def abort_all(
    http: httpx.AsyncClient, endpoint: str, *, headers: Mapping[str, str] | None = None, timeout: float
) -> list[EngineAnswer]:
    """``/abort_request {"abort_all": true}`` on every engine behind ``endpoint``."""
    try:
        fleet = await discover(http, endpoint, headers=headers, timeout=timeout)
    except FleetError as exc:
        return [EngineAnswer(endpoint.rstrip("/"), None, str(exc))]
    return await call_engines(
        http, fleet, "POST", "/abort_request", {"rid": "", "abort_all": True}, headers=headers, timeout=timeout
    )


def _snippet(response: httpx.Response, limit: int = 300) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")
