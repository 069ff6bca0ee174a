"""The ingest API server: the runners' only way to talk to the control side.

Per-rollout bearer tokens (derived, see tokens.py) checked in constant time; a
missing token is 401, a token of another rollout 403, and neither writes
anything. Bodies are size-limited. Uploads are content-addressed, so a retried
upload is stored once; events go through the phase machine, so a retried event
is recognised and acknowledged as a duplicate.

Also serves the trainers' results endpoint, which authenticates Kubernetes
identities with TokenReview and authorizes them with SubjectAccessReview (only
identities allowed to get swerollouts in that namespace may read results).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel, TypeAdapter, ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient, KubeError, NotFound
from swerollout.store import IntegrityError, NotFoundError, Owner, ResultStore, StoreError
from swerollout.store import ObjectKind as StoreKind
from swerollout.store.models import sibling_ref
from swerollout.wire import ingest as wire

from . import retries
from .cache import Tracked
from .metrics import OperatorMetrics
from .reconciler import Reconciler
from .tokens import TokenKey, TokenKind

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

LISTEN_BACKLOG = 4096
"""Connections the kernel queues for us to accept. Thousands of runners connect at once
(a batch starting, every runner re-polling after an operator restart); with aiohttp's
default of 128 the queue overflowed, the kernel dropped their SYNs, and at 2,000 runners
1,520 connects timed out after 30 s of SYN retries (the lifecycle bench). The kernel caps
it at net.core.somaxconn (4096 by default)."""


class ShardOwner(Protocol):
    """Which rollouts this replica answers for (the runtime's shards; every one without them)."""

    def owns(self, namespace: str, name: str) -> bool: ...

    def owner_url(self, namespace: str, name: str) -> str | None: ...


_STORE_KIND = {
    wire.ObjectKind.TRAJECTORY: StoreKind.TRAJECTORY,
    wire.ObjectKind.SNAPSHOT: StoreKind.SNAPSHOT,
    wire.ObjectKind.CHECKPOINT: StoreKind.CHECKPOINT,
    wire.ObjectKind.REPORT: StoreKind.REPORT,
    wire.ObjectKind.PATCH: StoreKind.OTHER,
    wire.ObjectKind.LOG: StoreKind.LOG,
}


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response(wire.ErrorBody(error=error, message=message).model_dump(), status=status)


def _store_error(exc: StoreError) -> web.Response:
    """503 only when retrying can help; a corrupted object or a misconfigured store is a 500."""
    if exc.retryable:
        return _error(503, "StoreUnavailable", str(exc))
    return _error(500, type(exc).__name__, str(exc))


class IngestServer:
    def __init__(
        self,
        reconciler: Reconciler,
        store: ResultStore,
        token_key: TokenKey,
        metrics: OperatorMetrics,
        kube: AsyncKubeClient,
        *,
        host: str,
        port: int,
        owner: ShardOwner | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.store = store
        self.token_key = token_key
        self.metrics = metrics
        self.kube = kube
        self.host = host
        self.port = port
        self.owner = owner
        self._runner: web.AppRunner | None = None
        self._events_in_flight: dict[tuple[str, str], asyncio.Future[wire.Ack]] = {}
        """(rollout uid, Idempotency-Key) -> the application of that event still under way."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=wire.MAX_OBJECT_BYTES, middlewares=[self._count])
        p = wire.API_PREFIX + "/{ns}/{name}/{uid}"
        app.router.add_get(p + "/assignment", self._runner_route(self._assignment), name="assignment")
        app.router.add_post(p + "/progress", self._runner_route(self._progress), name="progress")
        app.router.add_put(p + "/objects/{kind}", self._runner_route(self._put_object), name="put_object")
        app.router.add_get(p + "/objects/{kind}/{sha256}", self._runner_route(self._get_object), name="get_object")
        app.router.add_post(p + "/events", self._runner_route(self._event), name="events")
        app.router.add_get("/v1/results/{ns}/{name}/{kind}", self._results, name="results")
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, backlog=LISTEN_BACKLOG).start()

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.name or "unknown"
        started = time.monotonic()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.metrics.ingest_requests.labels(route, str(exc.status)).inc()
            raise
        finally:
            self.metrics.ingest_seconds.labels(route).observe(time.monotonic() - started)
        self.metrics.ingest_requests.labels(route, str(response.status)).inc()
        return response

    # -- authentication ------------------------------------------------------------

    def _runner_route(self, handler: Callable[[web.Request, Tracked], Awaitable[web.StreamResponse]]) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            ns, name, uid = request.match_info["ns"], request.match_info["name"], request.match_info["uid"]
            header = request.headers.get(wire.TOKEN_HEADER, "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return _error(401, "Unauthorized", "send `Authorization: Bearer <the rollout's ingest token>`")
            if not self.token_key.verify(token.strip(), TokenKind.INGEST, ns, name, uid):
                return _error(403, "Forbidden", f"this token is not valid for rollout {ns}/{name} ({uid})")
            if self.owner is not None and not self.owner.owns(ns, name):
                return self._misdirected(ns, name)
            try:
                entry = await self.reconciler.lookup_or_fetch(ns, name, uid)
            except KubeError as exc:
                return _error(503, "ApiUnavailable", f"could not read rollout {ns}/{name}: {exc}")
            if entry is None:
                return _error(404, "NotFound", f"rollout {ns}/{name} ({uid}) does not exist (deleted?)")
            return await handler(request, entry)

        return wrapped

    def _misdirected(self, ns: str, name: str) -> web.Response:
        """Another replica owns this rollout's shard: 421 and its address (the runner follows
        it), or 503 while the shard moves between replicas (the runner retries)."""
        assert self.owner is not None
        url = self.owner.owner_url(ns, name)
        if url is None:
            return _error(503, "ShardMoving", f"no replica holds the shard of {ns}/{name} now; retry")
        response = _error(421, "Misdirected", f"rollout {ns}/{name} is handled by the replica at {url}")
        response.headers[wire.OWNER_HEADER] = url
        return response

    async def _json(self, request: web.Request, model: type[BaseModel] | TypeAdapter[Any]) -> Any:
        if request.content_length is not None and request.content_length > wire.MAX_JSON_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=wire.MAX_JSON_BYTES, actual_size=request.content_length)
        raw = await request.read()
        if len(raw) > wire.MAX_JSON_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=wire.MAX_JSON_BYTES, actual_size=len(raw))
        try:
            return model.validate_json(raw) if isinstance(model, TypeAdapter) else model.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "body"
            raise web.HTTPBadRequest(
                text=wire.ErrorBody(error="Invalid", message=f"{field}: {first['msg']}").model_dump_json(),
                content_type="application/json",
            ) from None

    # -- runner routes ---------------------------------------------------------------

    async def _assignment(self, request: web.Request, entry: Tracked) -> web.StreamResponse:
        role = request.headers.get("X-Swerollout-Role", "rollout")
        try:
            attempt = int(request.headers.get("X-Swerollout-Attempt", "1"))
            wait = float(request.query.get("wait", "0"))
        except ValueError:
            return _error(400, "Invalid", "X-Swerollout-Attempt and ?wait must be numbers")
        if not math.isfinite(wait) or wait < 0:
            # nan compares false with everything: a deadline of nan never passes
            return _error(
                400, "Invalid", f"?wait must be a finite number of seconds >= 0 (got {request.query['wait']!r})"
            )
        wait = min(wait, wire.MAX_WAIT_SECONDS)
        after = request.query.get("after")
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            assignment = self.reconciler.assignment(entry, role=role, attempt=attempt)
            remaining = deadline - asyncio.get_running_loop().time()
            if assignment.id != after or remaining <= 0 or entry.uid not in self.reconciler.tracked:
                return web.json_response(assignment.model_dump(mode="json"))
            # asyncio.timeout, not wait_for: wait_for runs the wait in a task of its own, one
            # more task (and its coroutine) per parked runner for as long as it is parked.
            async with entry.changed:
                try:
                    async with asyncio.timeout(remaining):
                        await entry.changed.wait()
                except TimeoutError:
                    pass

    async def _progress(self, request: web.Request, entry: Tracked) -> web.StreamResponse:
        progress = await self._json(request, wire.ProgressReport)
        await self.reconciler.on_progress(entry, progress)
        return web.json_response(wire.Ack(phase=entry.phase.value).model_dump())

    async def _put_object(self, request: web.Request, entry: Tracked) -> web.StreamResponse:
        try:
            kind = wire.ObjectKind(request.match_info["kind"])
        except ValueError:
            return _error(400, "Invalid", f"object kind must be one of {[k.value for k in wire.ObjectKind]}")
        limit = wire.MAX_LOG_BYTES if kind is wire.ObjectKind.LOG else wire.MAX_OBJECT_BYTES
        if request.content_length is None and kind is wire.ObjectKind.LOG:
            return _error(411, "LengthRequired", "a log upload needs a Content-Length")
        if request.content_length is not None and request.content_length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
        claimed = request.headers.get(wire.SHA256_HEADER) or None
        if claimed is not None and not _SHA256_HEX.fullmatch(claimed):
            return _error(400, "Invalid", f"{wire.SHA256_HEADER} must be 64 lowercase hex digits (the body's sha256)")
        owner = Owner(namespace=entry.namespace, uid=entry.uid)
        try:
            # Streamed and hashed off the event loop by the store; a body that does not
            # match its claimed digest (truncated, corrupted) is never stored.
            stored = await self.store.put_stream(
                owner, _STORE_KIND[kind], request.content.iter_chunked(1 << 20), expect_sha256=claimed
            )
        except IntegrityError as exc:
            return _error(400, "DigestMismatch", f"the body does not match {wire.SHA256_HEADER}: {exc}")
        except StoreError as exc:
            return _store_error(exc)
        ref = wire.StoredObjectRef(kind=kind, sha256=stored.sha256, bytes=stored.bytes, ref=stored.ref)
        return web.json_response(ref.model_dump(mode="json"))

    async def _get_object(self, request: web.Request, entry: Tracked) -> web.StreamResponse:
        sha = request.match_info["sha256"]
        if not _SHA256_HEX.fullmatch(sha):
            return _error(400, "Invalid", "the object's sha256 must be 64 lowercase hex digits")
        # Only objects this rollout's status points at can be read back.
        status = entry.rollout_status
        candidates = [
            status.partial.snapshot if status.partial else None,
            status.result.patch if status.result else None,
            status.result.trajectory if status.result else None,
        ]
        ref = next((c.ref for c in candidates if c is not None and c.sha256 == sha), None)
        head = status.checkpoint.snapshot if status.checkpoint else None
        if ref is None and head is not None and request.match_info["kind"] == wire.ObjectKind.CHECKPOINT.value:
            # A checkpoint segment names its parent by sha256 only: any checkpoint segment
            # of this rollout's own prefix may be read (the store checks the sha256).
            ref = sibling_ref(head.ref, sha)
        if ref is None:
            return _error(404, "NotFound", f"no object {sha} is referenced by this rollout's status")
        try:
            data = await self.store.get(ref, expect_sha256=sha)
        except NotFoundError:
            return _error(404, "NotFound", f"object {sha} is missing from the store")
        except StoreError as exc:
            return _store_error(exc)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _event(self, request: web.Request, entry: Tracked) -> web.StreamResponse:
        event: wire.RunnerEvent = await self._json(request, wire.RUNNER_EVENT)
        key = (entry.uid, request.headers.get(wire.IDEMPOTENCY_HEADER, ""))
        sender = _sender_attempt(request)
        try:
            if sender is not None and retries.superseded(entry.rollout_status, sender):
                # A replaced attempt's runner (its pod still in its grace period, told to
                # stop): nothing it reports applies to the attempt that replaced it.
                return web.json_response(wire.Ack(ok=True, duplicate=True, phase=entry.phase.value).model_dump())
            if not key[1]:
                ack = await self.reconciler.on_runner_event(entry, event)
            else:
                # A runner that timed out waiting resends the same event (same key): it
                # joins the application still under way (one lock wait, one write) rather
                # than queueing a second one behind it. Shielded: a caller that goes away
                # does not cut the write short.
                running = self._events_in_flight.get(key)
                if running is None:
                    running = asyncio.ensure_future(self.reconciler.on_runner_event(entry, event))
                    self._events_in_flight[key] = running
                    running.add_done_callback(lambda _: self._events_in_flight.pop(key, None))
                ack = await asyncio.shield(running)
        except KubeError as exc:
            return _error(503, "ApiUnavailable", f"could not record the event: {exc}")
        return web.json_response(ack.model_dump())

    # -- trainer results endpoint -------------------------------------------------------

    async def _results(self, request: web.Request) -> web.StreamResponse:
        ns, name, kind = request.match_info["ns"], request.match_info["name"], request.match_info["kind"]
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return _error(401, "Unauthorized", "send `Authorization: Bearer <a Kubernetes token>`")
        try:
            review = await self.kube.token_review(token.strip())
            if not review.get("authenticated"):
                return _error(401, "Unauthorized", "the token is not valid for this cluster")
            user = review.get("user") or {}
            access = await self.kube.subject_access_review(
                user.get("username", ""),
                "get",
                api.PLURAL,
                namespace=ns,
                group=api.GROUP,
                groups=user.get("groups") or [],
                name=name,
            )
        except KubeError as exc:
            return _error(503, "ApiUnavailable", f"could not check the caller: {exc}")
        if not access.get("allowed"):
            return _error(403, "Forbidden", f"{user.get('username')} may not get swerollouts in {ns}")
        entry = self.reconciler.rollouts.find(ns, name)
        if entry is not None:
            status, phase = entry.rollout_status, entry.phase.value
        elif self.owner is not None and not self.owner.owns(ns, name):
            # Another replica's shard: its status is read here (the store is shared), so a
            # trainer needs no notion of shards.
            try:
                body = await self.kube.get(SWEROLLOUTS, name, ns)
            except NotFound:
                return _error(404, "NotFound", f"rollout {ns}/{name} not found")
            except KubeError as exc:
                return _error(503, "ApiUnavailable", f"could not read rollout {ns}/{name}: {exc}")
            status = api.SWERolloutStatus.model_validate(body.get("status") or {})
            phase = status.phase.value
        else:
            return _error(404, "NotFound", f"rollout {ns}/{name} not found")
        refs = {
            "trajectory": status.result.trajectory if status.result else None,
            "patch": status.result.patch if status.result else None,
            "snapshot": status.partial.snapshot if status.partial else None,
            "report": status.reward.report if status.reward else None,
        }
        if kind not in refs:
            return _error(400, "Invalid", f"kind must be one of {sorted(refs)}")
        ref = refs[kind]
        if not ref:
            return _error(404, "NotFound", f"rollout {ns}/{name} has no {kind} (phase {phase})")
        try:
            data = await self.store.get(ref.ref, expect_sha256=ref.sha256)
        except StoreError as exc:
            return _store_error(exc)
        return web.Response(body=data, content_type="application/octet-stream")


def _sender_attempt(request: web.Request) -> int | None:
    """The rollout attempt a rollout pod's runner reports for (None: an eval pod, which
    counts its own attempts, or a caller that does not say)."""
    if request.headers.get("X-Swerollout-Role", "rollout") != "rollout":
        return None
    try:
        return int(request.headers["X-Swerollout-Attempt"])
    except (KeyError, ValueError):
        return None
