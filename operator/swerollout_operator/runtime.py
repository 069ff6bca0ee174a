"""The long-lived parts of one operator process, created at startup and shared by handlers:
the clients, the caches behind the reconciler, the ingest and health servers, the shard
leases, and the work queue whose workers run one pass per rollout (`OperatorRuntime._work`).

The work queue (`KeyedQueue`) is keyed, with bounded concurrency, in the shape of client-go's.

Watch events only say *which* rollout to look at; the work itself reads the
caches. So events for one key coalesce: a key is queued at most once, and a key
that changes while it is being worked on is queued again when that work ends
(never worked on twice at once). Retries are delayed adds, keyed: a rollout's
backoff delays only that rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from swerollout.api.shards import LABEL_SHARD, selector, shard_label
from swerollout.backoff import Backoff, Schedule
from swerollout.kube import (
    SWEROLLOUTS,
    AsyncKubeClient,
    Conflict,
    KubeConfig,
    KubeError,
    NotFound,
    is_urgent,
    load_incluster,
    load_kubeconfig,
)
from swerollout.kube._base import RequestSpec
from swerollout.store import Owner, ResultStore, open_store

from . import looplag
from .http import HealthServer
from .ingest import IngestServer
from .metrics import OperatorMetrics
from .reconciler import Reconciler
from .settings import OperatorSettings
from .shards import ShardLeases
from .tokens import TokenKey

log = logging.getLogger(__name__)
LABEL_POLL_SECONDS = 2.0


# -- the work queue ----------------------------------------------------------------------

RECONCILE_BACKOFF = Backoff(first_seconds=0.5, max_seconds=60.0)
"""Retries of a failed pass over one rollout: no bound (a level-triggered controller
must get there), at most a minute apart."""


class KeyedBackoff:
    """When to try a key (a rollout) again after consecutive failures, on the project's
    one backoff rule. A retryable failure (429, 5xx, transport) follows the schedule; any
    other cannot be fixed by a quick retry, so it waits the longest pause at once.
    Success forgets the key."""

    def __init__(self, policy: Backoff = RECONCILE_BACKOFF) -> None:
        self.policy = policy
        self._schedules: dict[str, Schedule] = {}

    def failed(self, key: str, exc: BaseException) -> float:
        """Record a failure; returns the pause before the next try (seconds)."""
        schedule = self._schedules.setdefault(key, self.policy.start())
        if not (isinstance(exc, KubeError) and exc.retryable):
            schedule.retries += 1
            return self.policy.max_seconds
        delay = schedule.next_delay(exc.retry_after_seconds)
        return self.policy.max_seconds if delay is None else delay

    def succeeded(self, key: str) -> None:
        self._schedules.pop(key, None)


class KeyedQueue:
    def __init__(
        self,
        work: Callable[[str], Awaitable[None]],
        *,
        workers: int,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self._work = work
        self._workers = workers
        self._on_wait = on_wait
        """Told how long each key waited in the queue for a worker (seconds)."""
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: dict[str, float] = {}
        """Queued keys -> when they were queued (monotonic)."""
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.idle = asyncio.Event()
        self.idle.set()

    def __len__(self) -> int:
        return len(self._queued) + len(self._active)

    def add(self, key: str) -> None:
        """Work on `key` soon; a no-op when it is already queued."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued[key] = time.monotonic()
        self.idle.clear()
        self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        """Work on `key` after `delay` seconds (an earlier `add` wins)."""
        if key in self._queued or key in self._timers:
            return
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._dirty.discard(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"swerollout-worker-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            queued = self._queued.pop(key)
            if self._on_wait is not None:
                self._on_wait(time.monotonic() - queued)
            self._active.add(key)
            try:
                await self._work(key)
            except Exception:  # noqa: BLE001 - `work` handles its own errors; a worker never dies
                log.exception("work on %s failed", key)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                if not self._queued and not self._active:
                    self.idle.set()


# -- the process -------------------------------------------------------------------------


class CountingKubeClient(AsyncKubeClient):
    """The operator's API client, counting what it sends (reads are GETs) for /metrics."""

    metrics: OperatorMetrics | None = None

    async def _send(self, spec: RequestSpec) -> dict[str, object]:
        if self.metrics is None:
            return await super()._send(spec)
        method = spec.method.upper()
        self.metrics.api_requests.labels(method).inc()
        started = time.monotonic()
        try:
            return await super()._send(spec)
        finally:
            self.metrics.api_request_seconds.labels(method, _priority(is_urgent())).observe(time.monotonic() - started)

    def _slot_waited(self, seconds: float, urgent: bool) -> None:
        if self.metrics is not None:
            self.metrics.api_slot_wait.labels(_priority(urgent)).observe(seconds)


def _priority(urgent: bool) -> str:
    return "urgent" if urgent else "normal"


class OperatorRuntime:
    def __init__(self, settings: OperatorSettings, *, kubeconfig: Path | None) -> None:
        self.settings = settings
        self.kubeconfig = kubeconfig
        self.in_cluster = kubeconfig is None
        self.metrics = OperatorMetrics()
        self.token_key = TokenKey.from_file(settings.token_key_file) if settings.token_key_file else TokenKey.random()
        self.backoff = KeyedBackoff()
        self._queue: KeyedQueue | None = None
        self._kube: CountingKubeClient | None = None
        self._store: ResultStore | None = None
        self._reconciler: Reconciler | None = None
        self._health: HealthServer | None = None
        self._ingest: IngestServer | None = None
        self.shards: ShardLeases | None = None
        self.watches_changed = asyncio.Event()
        """Set when the owned shards changed: the watches restart with the new selector (__main__)."""
        self._labeller: asyncio.Task[None] | None = None
        self._loop_lag: asyncio.Task[None] | None = None

    @property
    def reconciler(self) -> Reconciler:
        if self._reconciler is None:
            raise RuntimeError("the operator runtime is not started")
        return self._reconciler

    @property
    def queue(self) -> KeyedQueue:
        if self._queue is None:
            raise RuntimeError("the operator runtime is not started")
        return self._queue

    async def _work(self, uid: str) -> None:
        """One pass over one rollout; a failure retries that rollout alone, with backoff."""
        try:
            await self.reconciler.reconcile(uid)
        except Exception as exc:  # noqa: BLE001 - any failure is retried, none kills a worker
            self.metrics.reconcile_errors.labels("rollout").inc()
            delay = self.backoff.failed(uid, exc)
            self.queue.add_after(uid, delay)
            entry = self.reconciler.tracked.get(uid)
            where = f"{entry.namespace}/{entry.name}" if entry else uid
            log.warning("reconciling %s failed (%s: %s); retrying in %.1f s", where, type(exc).__name__, exc, delay)
        else:
            self.backoff.succeeded(uid)
        self.metrics.work_queue.set(len(self.queue))

    def forget(self, uid: str) -> None:
        self.reconciler.rollouts.forget(uid)
        self.reconciler.pods.forget_owner(uid)
        self.reconciler.deadlines.forget(uid)
        self.queue.forget(uid)
        self.backoff.succeeded(uid)

    # -- shards ------------------------------------------------------------------------

    def owns(self, namespace: str, name: str) -> bool:
        """Whether this replica handles the rollout now (always, without --shards)."""
        return self.shards is None or self.shards.owns(namespace, name)

    def owner_url(self, namespace: str, name: str) -> str | None:
        return self.shards.owner_url(namespace, name) if self.shards is not None else None

    def watch_selector(self) -> str | None:
        """The label selector of this replica's rollout and pod watches (None: everything)."""
        if self.shards is None:
            return None
        return selector(self.shards.owned, self.settings.shards)

    def mislabelled(self, body: dict[str, Any]) -> str | None:
        """The shard label a rollout should carry, when it carries another (None: it is right)."""
        if self.shards is None:
            return None
        meta = body["metadata"]
        want = shard_label(meta["namespace"], meta["name"])
        return want if (meta.get("labels") or {}).get(LABEL_SHARD) != want else None

    async def relabel(self, body: dict[str, Any]) -> None:
        """Give a rollout the shard label its name hashes to (one metadata write): the
        client sets it at submission; this is for rollouts made without it (kubectl) or
        with a wrong one. Only the holder of shard 0 labels, so it is written once."""
        want = self.mislabelled(body)
        if want is None or self.shards is None or 0 not in self.shards.owned:
            return
        meta = body["metadata"]
        patch = {"metadata": {"labels": {LABEL_SHARD: want}, "resourceVersion": meta["resourceVersion"]}}
        try:
            await self.reconciler.kube.patch(SWEROLLOUTS, meta["name"], patch, meta["namespace"])
        except (Conflict, NotFound):
            pass  # changed meanwhile: the next look sees it again
        except KubeError as exc:
            log.warning("labelling %s/%s with its shard failed: %s", meta["namespace"], meta["name"], exc)

    async def _label_unlabelled(self) -> None:
        """Rollouts without a shard label are in no replica's watch: the holder of shard 0
        looks for them every LABEL_POLL_SECONDS and labels them."""
        every: list[str | None] = list(self.settings.namespaces) if self.settings.namespaces else [None]
        while True:
            await asyncio.sleep(LABEL_POLL_SECONDS)
            if self.shards is None or 0 not in self.shards.owned:
                continue
            for namespace in every:
                try:
                    async for body in self.reconciler.kube.iter_items(
                        SWEROLLOUTS, namespace, label_selector=f"!{LABEL_SHARD}"
                    ):
                        await self.relabel(body)
                except KubeError as exc:
                    log.warning("looking for rollouts without a shard label failed: %s", exc)

    def _shards_changed(self, owned: frozenset[int]) -> None:
        """Stop handling what is no longer ours at once (the ingest answers 421 for it from
        now on, no pass starts for it); new shards come with the restarted watches' listing."""
        if self._reconciler is not None:
            for uid, entry in list(self._reconciler.tracked.items()):
                if not self.owns(entry.namespace, entry.name):
                    self.forget(uid)
        self.metrics.shards_owned.set(len(owned))
        self.watches_changed.set()

    def kube_config(self) -> KubeConfig:
        """Who the operator is: the --kubeconfig (read by the `kubernetes` package's loader,
        so exec plugins work), else the pod's ServiceAccount (read without that package)."""
        if self.kubeconfig is not None:
            return load_kubeconfig(self.kubeconfig)
        return load_incluster(self.settings.service_account_dir)

    async def start(self) -> None:
        self._loop_lag = asyncio.create_task(
            looplag.watch(self.metrics.event_loop_lag.observe), name="swerollout-loop-lag"
        )
        config = self.kube_config()
        self._kube = CountingKubeClient(
            config, max_in_flight=self.settings.api_max_in_flight, http2=self.settings.api_http2
        )
        self._kube.metrics = self.metrics
        options = {"endpoint_url": self.settings.s3_endpoint_url} if self.settings.s3_endpoint_url else {}
        self._store = open_store(self.settings.store_url, **options)
        await self._store.check()
        self._reconciler = Reconciler(self._kube, self.settings, self.token_key, self.metrics)
        self.metrics.phase_ages = self._reconciler.rollouts.oldest_in_phase
        await self._reconciler.sync_batches(self.settings.namespaces)
        self._queue = KeyedQueue(
            self._work, workers=self.settings.workers, on_wait=self.metrics.work_queue_wait.observe
        )
        self._reconciler.requeue = self._queue.add
        self._reconciler.requeue_after = self._queue.add_after
        self._queue.start()
        store = self._store

        async def delete_objects(namespace: str, name: str, uid: str) -> None:
            await store.delete_owner(Owner(namespace=namespace, uid=uid))

        self._reconciler.on_deleted_rollout.append(delete_objects)
        self._health = HealthServer(
            self.metrics,
            self.settings.bind_host,
            self.settings.metrics_port,
            ready=lambda: self._reconciler is not None,
        )
        await self._health.start()
        self._ingest = IngestServer(
            self._reconciler,
            self._store,
            self.token_key,
            self.metrics,
            self._kube,
            host=self.settings.bind_host,
            port=self.settings.ingest_port,
            owner=self,
        )
        await self._ingest.start()
        if self.settings.shards:
            identity = self.settings.replica_id or f"{socket.gethostname().lower()}-{os.getpid()}"
            self.shards = ShardLeases(
                self._kube,
                self.settings.lease_namespace or config.namespace,
                self.settings.shards,
                identity,
                self.settings.advertise_url or self.settings.ingest_url,
                self._shards_changed,
            )
            await self.shards.step()  # the first shards before the first watch
            self.shards.start()
            self._labeller = asyncio.create_task(self._label_unlabelled(), name="swerollout-shard-labeller")

    async def stop(self) -> None:
        for task in (self._labeller, self._loop_lag):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.shards is not None:
            await self.shards.stop()
        for server in (self._ingest, self._health):
            if server:
                await server.stop()
        if self._queue:
            await self._queue.stop()
        if self._reconciler:
            await self._reconciler.aclose()
        if self._store:
            await self._store.aclose()
        if self._kube:
            await self._kube.aclose()
