"""The Kubernetes REST client (:class:`AsyncKubeClient`): the one implementation of every
request. The blocking :class:`~swerollout.kube.sync.KubeClient` runs this one on a portal
thread and waits; it has no requests of its own.

It returns plain dicts (the objects exactly as the API server sends them). All request
building and answer parsing lives in :class:`~swerollout.kube._base.BaseKubeClient`;
this class only does I/O.

Watch yields :class:`WatchEvent`; an ``ERROR`` line is raised as the matching
:class:`KubeError` (typically :class:`Gone` when the resourceVersion expired).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

import httpx

from swerollout.kube._base import (
    BaseKubeClient,
    Object,
    PatchType,
    PropagationPolicy,
    RequestSpec,
    TokenRequestResult,
    WatchEvent,
)
from swerollout.kube.config import KubeConfig
from swerollout.kube.errors import TransportError, error_from_response
from swerollout.kube.resources import ResourceType

# A watch may sit idle for minutes between events: no read timeout, the server's
# timeoutSeconds (or the caller) ends it.
_WATCH_TIMEOUT = httpx.Timeout(30.0, read=None)
# Every connection kept alive for reuse: httpx keeps only 20 by default, so under
# concurrent load (an operator at batch scale, a batch marked at once) each request
# past the 20th paid a new TCP and TLS handshake with the API server. Idle ones still
# expire after httpx's 5 s, well inside any server's idle timeout (no stale reuse).
_ASYNC_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
MAX_IN_FLIGHT = 64
"""Requests (not watches) of one AsyncKubeClient on the wire at once; the rest wait
their turn on a semaphore. httpcore's pool re-scans its whole queue of waiting
requests each time a connection frees, so 500 requests queued there cost time
quadratic in the queue (a quarter of a busy operator's CPU); a semaphore's waiters
cost nothing. Below the pool's size, so the pool never queues."""


def _transport_error(spec: RequestSpec, exc: Exception) -> TransportError:
    return TransportError(f"{spec.method} {spec.path} failed: {type(exc).__name__}: {exc}")


_URGENT: contextvars.ContextVar[bool] = contextvars.ContextVar("swerollout_kube_urgent", default=False)


class _Slots:
    """A semaphore of `n` whose urgent waiters go first (FIFO within each class): a
    request someone waits on (the ingest ack of a runner's report) overtakes the backlog
    of background writes (coalesced progress, Events, a batch's passes) instead of
    queueing behind all of it."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (deque(), deque())

    async def acquire(self, urgent: bool) -> None:
        if self._free > 0 and not (self._waiters[0] or self._waiters[1]):
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiters[0 if urgent else 1]
        queue.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            else:
                queue.remove(fut)
            raise

    def release(self) -> None:
        for queue in self._waiters:
            while queue:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_result(None)
                    return
        self._free += 1


def is_urgent() -> bool:
    """Whether requests made here now are urgent (inside `urgent()`)."""
    return _URGENT.get()


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """Requests made inside (by this task and the tasks it starts) take the next free slot
    of their AsyncKubeClient before any request that is not urgent."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


class AsyncKubeClient(BaseKubeClient):
    """asyncio client. Use ``async with`` or :meth:`aclose`."""

    def __init__(
        self, config: KubeConfig, *, timeout: float = 30.0, max_in_flight: int = MAX_IN_FLIGHT, http2: bool = False
    ) -> None:
        super().__init__(config, timeout=timeout)
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        if http2:
            from swerollout.kube import _hpack  # h2's own dependency: only with http2

            _hpack.install()
        self._http = httpx.AsyncClient(
            base_url=config.server, timeout=timeout, limits=_ASYNC_LIMITS, http2=http2, **config.http_options()
        )
        self._slots = _Slots(max_in_flight)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncKubeClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    def _slot_waited(self, seconds: float, urgent: bool) -> None:
        """How long a request waited for an in-flight slot (a subclass counts it)."""

    async def _send(self, spec: RequestSpec) -> Object:
        priority = _URGENT.get()
        queued = time.monotonic()
        await self._slots.acquire(priority)
        self._slot_waited(time.monotonic() - queued, priority)
        try:
            resp = await self._http.request(
                spec.method,
                spec.path,
                params=spec.params,
                content=spec.body,
                headers=self._headers(spec),
                extensions=self.config.request_extensions(),
            )
        except httpx.TransportError as exc:
            raise _transport_error(spec, exc) from exc
        finally:
            self._slots.release()
        return self._decode(resp.status_code, resp.content)

    async def request(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Object:
        """Any other endpoint (``/version``, ``/apis``); JSON in, JSON out."""
        return await self._send(self._req_raw(method, path, params, body))

    async def get(
        self, rt: ResourceType, name: str, namespace: str | None = None, *, subresource: str | None = None
    ) -> Object:
        return await self._send(self._req_get(rt, name, namespace, subresource))

    async def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Object:
        """One page (the List object); ``metadata.continue`` asks for the next."""
        return await self._send(
            self._req_list(rt, namespace, label_selector, field_selector, limit, continue_token, resource_version)
        )

    async def iter_items(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[Object]:
        """Every item, following ``continue`` tokens page by page."""
        token: str | None = None
        while True:
            page = await self.list(
                rt,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            for item in page.get("items") or []:
                yield item
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return

    async def create(
        self,
        rt: ResourceType,
        body: Object,
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        return await self._send(self._req_create(rt, body, namespace, None, None, field_manager, dry_run))

    async def replace(
        self,
        rt: ResourceType,
        body: Object,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """PUT the whole object; carries metadata.resourceVersion, so a stale copy raises Conflict."""
        return await self._send(self._req_replace(rt, body, namespace, subresource, field_manager, dry_run))

    async def patch(
        self,
        rt: ResourceType,
        name: str,
        patch: Object | builtins.list[Object],
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> Object:
        return await self._send(
            self._req_patch(rt, name, patch, namespace, patch_type, subresource, field_manager, force, dry_run)
        )

    async def apply(
        self,
        rt: ResourceType,
        body: Object,
        namespace: str | None = None,
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Server-side apply of ``body`` (must carry apiVersion, kind, metadata.name)."""
        ns = namespace or (body.get("metadata") or {}).get("namespace") if rt.namespaced else None
        name = (body.get("metadata") or {}).get("name") or ""
        return await self.patch(
            rt,
            name,
            body,
            ns,
            patch_type="apply",
            subresource=subresource,
            field_manager=field_manager,
            force=force,
            dry_run=dry_run,
        )

    async def delete(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Delete; ``uid``/``resource_version`` are preconditions (Conflict if they differ)."""
        return await self._send(
            self._req_delete(
                rt, name, namespace, propagation_policy, grace_period_seconds, uid, resource_version, dry_run
            )
        )

    async def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: PropagationPolicy | None = None,
    ) -> Object:
        """Delete every matching object of one type (one request)."""
        return await self._send(
            self._req_delete_collection(
                rt, namespace, label_selector, field_selector, grace_period_seconds, propagation_policy
            )
        )

    async def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        spec = self._req_watch(
            rt,
            namespace,
            resource_version,
            label_selector,
            field_selector,
            allow_bookmarks,
            timeout_seconds,
            send_initial_events,
        )
        try:
            async with self._http.stream(
                spec.method,
                spec.path,
                params=spec.params,
                headers=self._headers(spec),
                timeout=_WATCH_TIMEOUT,
                extensions=self.config.request_extensions(),
            ) as resp:
                if resp.status_code >= 400:
                    raise error_from_response(resp.status_code, await resp.aread())
                async for line in resp.aiter_lines():
                    event = self._decode_watch_line(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as exc:
            raise _transport_error(spec, exc) from exc

    async def get_status(self, rt: ResourceType, name: str, namespace: str | None = None) -> Object:
        return await self.get(rt, name, namespace, subresource="status")

    async def patch_status(
        self,
        rt: ResourceType,
        name: str,
        patch: Object | builtins.list[Object],
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
        force: bool = False,
    ) -> Object:
        return await self.patch(
            rt,
            name,
            patch,
            namespace,
            patch_type=patch_type,
            subresource="status",
            field_manager=field_manager,
            force=force,
        )

    async def replace_status(self, rt: ResourceType, body: Object, namespace: str | None = None) -> Object:
        return await self.replace(rt, body, namespace, subresource="status")

    async def bind_pod(self, namespace: str, pod: str, node: str, *, pod_uid: str | None = None) -> Object:
        """Assign a pending pod to a node (what a scheduler does)."""
        return await self._send(self._req_bind(namespace, pod, node, pod_uid))

    async def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audiences: builtins.list[str] | None = None,
        expiration_seconds: int = 3600,
    ) -> TokenRequestResult:
        """A bound ServiceAccount token from the TokenRequest API."""
        return self._token_result(
            await self._send(self._req_token(namespace, service_account, audiences, expiration_seconds))
        )

    async def token_review(self, token: str, *, audiences: builtins.list[str] | None = None) -> Object:
        """The ``status`` of a TokenReview: authenticated, user{username, groups, uid}, audiences."""
        return (await self._send(self._req_token_review(token, audiences))).get("status") or {}

    async def subject_access_review(
        self,
        user: str,
        verb: str,
        resource: str,
        *,
        namespace: str | None = None,
        group: str = "",
        groups: builtins.list[str] | None = None,
        subresource: str | None = None,
        name: str | None = None,
    ) -> Object:
        """The ``status`` of a SubjectAccessReview: allowed, denied, reason."""
        spec = self._req_access_review(user, groups, verb, resource, namespace, group, subresource, name)
        return (await self._send(spec)).get("status") or {}
