"""Following SWERollouts: list, then watch, as one stream of changes.

:func:`list_and_watch` is the one home of the list/watch rule (a server-ended watch
resumes from the last resourceVersion, bookmarks keep it fresh, a 410 Gone re-lists,
a few broken connections in a row are retried). ``wait``/``stream_results`` of a batch
and the per-sample :class:`SharedWatch` are built on it.

:class:`SharedWatch` is what per-sample trainer hooks (one coroutine per sample)
use: ONE watch per client over every rollout the client submits, a cache of their
latest objects, and waiters keyed by name. Ten thousand ``result(name)`` calls cost one
watch connection, not ten thousand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from swerollout.backoff import Backoff
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient, Gone, TransportError

Object = dict[str, Any]

log = logging.getLogger(__name__)

# How long one watch request lasts before the server ends it and we re-watch from the
# last resourceVersion (bookmarks keep that version fresh).
WATCH_SECONDS = 60
# Consecutive broken watch connections tolerated before giving up.
MAX_WATCH_RECONNECTS = 5
# The pause before each reconnect: the one backoff rule, reset by every event that arrives.
WATCH_RECONNECT = Backoff(first_seconds=0.2, max_seconds=5.0, attempts=MAX_WATCH_RECONNECTS + 1)


@dataclass(frozen=True)
class Listed:
    """The full state after a (re-)list: every object by name."""

    items: dict[str, Object]


@dataclass(frozen=True)
class Changed:
    """One object changed (``deleted``: it is gone; ``obj`` is its last state)."""

    obj: Object
    deleted: bool

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


async def list_and_watch(
    kube: AsyncKubeClient, namespace: str, selector: str
) -> AsyncGenerator[Listed | Changed, None]:
    """A :class:`Listed` first (and again after every 410 Gone), then one :class:`Changed`
    per event. Never ends on its own; KubeErrors other than Gone and a few transport
    errors propagate."""
    while True:
        page = await kube.list(SWEROLLOUTS, namespace, label_selector=selector)
        yield Listed({o["metadata"]["name"]: o for o in page.get("items") or []})
        version = str((page.get("metadata") or {}).get("resourceVersion", ""))
        reconnects = WATCH_RECONNECT.start()
        try:
            while True:
                stream = kube.watch(
                    SWEROLLOUTS,
                    namespace,
                    resource_version=version,
                    label_selector=selector,
                    allow_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS,
                )
                try:
                    # aclosing: a caller that stops early must close the HTTP stream now, not at GC.
                    async with aclosing(stream) as events:  # type: ignore[type-var]
                        async for event in events:
                            if reconnects.retries:
                                reconnects = WATCH_RECONNECT.start()
                            version = event.resource_version or version
                            if event.type == "BOOKMARK":
                                continue
                            yield Changed(event.object, deleted=event.type == "DELETED")
                except TransportError:
                    delay = reconnects.next_delay()
                    if delay is None:
                        raise
                    await asyncio.sleep(delay)
        except Gone:
            continue  # our resourceVersion expired: re-list


class SharedWatch:
    """One list+watch of the namespace's SWERollouts matching ``selector``, shared by
    every waiter of the client.

    ``until(name, done)`` returns the first state of ``name`` for which ``done(obj)`` is
    true. The watch starts with the first waiter and runs until :meth:`aclose`; if it
    fails (the API server refuses it, or keeps dropping it), every waiter gets the error
    and the next ``until`` starts a new one.
    """

    def __init__(self, kube: AsyncKubeClient, namespace: str, selector: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._selector = selector
        self._objects: dict[str, Object] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._synced: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _ensure_started(self) -> None:
        if not self.running:
            loop = asyncio.get_running_loop()
            self._synced = loop.create_future()
            self._task = loop.create_task(self._run(self._synced), name="swerollout-shared-watch")
        assert self._synced is not None
        await asyncio.shield(self._synced)

    async def _run(self, synced: asyncio.Future[None]) -> None:
        try:
            async with aclosing(list_and_watch(self._kube, self._namespace, self._selector)) as changes:
                async for change in changes:
                    if isinstance(change, Listed):
                        touched = set(self._objects) | set(change.items)
                        self._objects = dict(change.items)
                        if not synced.done():
                            synced.set_result(None)
                    else:
                        touched = {change.name}
                        if change.deleted:
                            self._objects.pop(change.name, None)
                        else:
                            self._objects[change.name] = change.obj
                    for name in touched:
                        self._wake(name)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.warning("the shared SWERollout watch stopped: %s", exc)
            if not synced.done():
                synced.set_exception(exc)
            for futures in self._waiters.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            self._waiters.clear()

    def _wake(self, name: str) -> None:
        for future in self._waiters.pop(name, []):
            if not future.done():
                future.set_result(None)

    def get(self, name: str) -> Object | None:
        """The latest state seen (None: not seen, or deleted)."""
        return self._objects.get(name)

    def seed(self, obj: Object) -> None:
        """Remember an object read directly (a GET) that the watch has not delivered yet."""
        name = str(obj["metadata"]["name"])
        if name not in self._objects:
            self._objects[name] = obj
            self._wake(name)

    async def until(
        self, name: str, done: Callable[[Object], bool], *, missing: Callable[[], Awaitable[None]] | None = None
    ) -> Object:
        """The first state of ``name`` with ``done(obj)``. ``missing`` is awaited whenever
        the object is not in the cache (it may raise, e.g. RolloutNotFound after a GET, or
        :meth:`seed` what it read)."""
        while True:
            await self._ensure_started()  # also restarts a watch that failed meanwhile
            obj = self._objects.get(name)
            if obj is None and missing is not None:
                await missing()
                obj = self._objects.get(name)
            if obj is not None and done(obj):
                return obj
            if not self.running:
                continue
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(name, []).append(future)
            try:
                await future
            finally:
                waiting = self._waiters.get(name)
                if waiting is not None and future in waiting:
                    waiting.remove(future)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for futures in self._waiters.values():
            for future in futures:
                future.cancel()
        self._waiters.clear()
