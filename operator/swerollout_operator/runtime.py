"""The long-lived parts of one operator process, created at startup and shared by handlers."""

from __future__ import annotations

import logging
from pathlib import Path

from swerollout.kube import AsyncKubeClient, KubeConfig, load_incluster, load_kubeconfig
from swerollout.kube._base import RequestSpec
from swerollout.store import Owner, ResultStore, open_store

from .http import HealthServer
from .ingest import IngestServer
from .metrics import OperatorMetrics
from .reconciler import Reconciler
from .settings import OperatorSettings
from .tokens import TokenKey
from .workqueue import KeyedBackoff, KeyedQueue

log = logging.getLogger(__name__)


class CountingKubeClient(AsyncKubeClient):
    """The operator's API client, counting what it sends (reads are GETs) for /metrics."""

    metrics: OperatorMetrics | None = None

    async def _send(self, spec: RequestSpec) -> dict[str, object]:
        if self.metrics is not None:
            self.metrics.api_requests.labels(spec.method.upper()).inc()
        return await super()._send(spec)


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
        self.queue.forget(uid)
        self.backoff.succeeded(uid)

    def kube_config(self) -> KubeConfig:
        """Who the operator is: the --kubeconfig (read by the `kubernetes` package's loader,
        so exec plugins work), else the pod's ServiceAccount (read without that package)."""
        if self.kubeconfig is not None:
            return load_kubeconfig(self.kubeconfig)
        return load_incluster(self.settings.service_account_dir)

    async def start(self) -> None:
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
        self._queue = KeyedQueue(self._work, workers=self.settings.workers)
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
        )
        await self._ingest.start()

    async def stop(self) -> None:
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
