"""The runner's side of the ingest API (the wire models live in swerollout.wire.ingest).

Every call is retried on transport errors, 429 and 5xx with capped exponential
backoff for a long time: the operator restarts (rolling upgrade, crash) must not
lose a runner's result. Retries are safe by construction: uploads are
content-addressed and events carry an idempotency key and go through the phase
machine, so a request that reached the operator before the connection dropped
changes nothing the second time.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Any

import httpx

from swerollout.backoff import Backoff
from swerollout.wire import ingest as wire

log = logging.getLogger(__name__)


class IngestError(Exception):
    """The operator refused a request (4xx other than 429): retrying will not help."""


class _Unanswered(Exception):
    """No answer, 429 or 5xx: the operator may answer if asked again (it may be restarting)."""


class IngestClient:
    def __init__(
        self,
        base_url: str,
        *,
        namespace: str,
        name: str,
        uid: str,
        token: str,
        role: str = "rollout",
        attempt: int = 1,
        give_up_after: float = 900.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: a connection pool shared by many clients in one process (the
        lifecycle bench runs thousands of runners); the caller closes it. Default: our own."""
        self._prefix = f"{wire.API_PREFIX}/{namespace}/{name}/{uid}"
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {token}",
                "X-Swerollout-Role": role,
                "X-Swerollout-Attempt": str(attempt),
            },
            timeout=httpx.Timeout(30.0, read=wire.MAX_WAIT_SECONDS + 30.0),
            transport=transport,
        )
        self._owns_transport = transport is None
        self._owner = ""
        """The replica of a sharded operator that owns this rollout (its base URL; empty: base_url)."""
        # The operator restarting (upgrade, crash) must not kill runners: keep trying for minutes.
        self._backoff = Backoff(first_seconds=0.5, max_seconds=15.0, budget_seconds=give_up_after)

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        def retrying(exc: BaseException, delay: float) -> None:
            log.warning("ingest %s %s failed (%s); retrying in %.1fs", method, path, exc, delay)

        loop = self._backoff.retrying(retryable=lambda exc: isinstance(exc, _Unanswered), on_retry=retrying)
        try:
            async for attempt in loop:
                with attempt:
                    return await self._once(method, path, **kwargs)
        except _Unanswered as exc:
            raise IngestError(
                f"{method} {path}: the operator did not answer for {loop.schedule.elapsed:.0f}s ({exc})"
            ) from None
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _once(self, method: str, path: str, *, followed: bool = False, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, self._owner + self._prefix + path, **kwargs)
        except httpx.TransportError as exc:
            self._owner = ""  # the replica we were sent to is gone (its shard moves on): ask the Service again
            raise _Unanswered(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code < 400:
            return response
        owner = response.headers.get(wire.OWNER_HEADER, "")
        if response.status_code == 421 and owner.startswith(("http://", "https://")):
            # A sharded operator: another replica owns this rollout. Go there, at once the
            # first time (a report repeated across the move is idempotent), else retry later.
            self._owner = owner.rstrip("/")
            if not followed:
                return await self._once(method, path, followed=True, **kwargs)
            raise _Unanswered(f"HTTP 421 (sent to {self._owner})")
        if response.status_code != 429 and response.status_code < 500:
            raise IngestError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        raise _Unanswered(f"HTTP {response.status_code}")

    async def assignment(self, *, after: str | None, wait: float) -> wire.Assignment:
        params = {"wait": str(wait)}
        if after:
            params["after"] = after
        response = await self._call("GET", "/assignment", params=params)
        return wire.ASSIGNMENT.validate_json(response.content)

    async def progress(self, progress: wire.ProgressReport) -> None:
        await self._call(
            "POST", "/progress", content=progress.model_dump_json(), headers={"Content-Type": "application/json"}
        )

    async def upload(self, kind: wire.ObjectKind, data: bytes) -> wire.StoredObjectRef:
        response = await self._call(
            "PUT",
            f"/objects/{kind.value}",
            content=data,
            headers={wire.SHA256_HEADER: hashlib.sha256(data).hexdigest(), "Content-Type": "application/octet-stream"},
        )
        return wire.StoredObjectRef.model_validate_json(response.content)

    async def download(self, ref: wire.StoredObjectRef) -> bytes:
        response = await self._call("GET", f"/objects/{ref.kind.value}/{ref.sha256}")
        data = response.content
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise IngestError(f"downloaded {ref.kind.value} {ref.sha256} does not match its sha256")
        return data

    async def event(self, event: wire.RunnerEvent) -> wire.Ack:
        key = secrets.token_hex(16)  # the same key on every retry of this event
        response = await self._call(
            "POST",
            "/events",
            content=event.model_dump_json(),
            headers={"Content-Type": "application/json", wire.IDEMPOTENCY_HEADER: key},
        )
        return wire.Ack.model_validate_json(response.content)
