"""The long-lived parts of one operator process, created at startup and shared by handlers."""

from __future__ import annotations

from pathlib import Path

from swerollout.kube import AsyncKubeClient
from swerollout.store import Owner, ResultStore, open_store

from .http import HealthServer
from .ingest import IngestServer
from .metrics import OperatorMetrics
from .reconciler import Reconciler
from .settings import OperatorSettings
from .tokens import TokenKey


class OperatorRuntime:
    def __init__(self, settings: OperatorSettings, *, kubeconfig: Path | None) -> None:
        self.settings = settings
        self.kubeconfig = kubeconfig
        self.in_cluster = kubeconfig is None
        self.metrics = OperatorMetrics()
        self.token_key = TokenKey.from_file(settings.token_key_file) if settings.token_key_file else TokenKey.random()
        self.retry: set[str] = set()
        """Rollout uids whose last reconcile failed; the sweeper retries them."""
        self._kube: AsyncKubeClient | None = None
        self._store: ResultStore | None = None
        self._reconciler: Reconciler | None = None
        self._health: HealthServer | None = None
        self._ingest: IngestServer | None = None

    @property
    def reconciler(self) -> Reconciler:
        if self._reconciler is None:
            raise RuntimeError("the operator runtime is not started")
        return self._reconciler

    async def start(self) -> None:
        self._kube = (
            AsyncKubeClient.from_kubeconfig(self.kubeconfig) if self.kubeconfig else AsyncKubeClient.in_cluster()
        )
        options = {"endpoint_url": self.settings.s3_endpoint_url} if self.settings.s3_endpoint_url else {}
        self._store = open_store(self.settings.store_url, **options)
        await self._store.check()
        self._reconciler = Reconciler(self._kube, self.settings, self.token_key, self.metrics)
        store = self._store

        async def delete_objects(namespace: str, name: str, uid: str) -> None:
            await store.delete_owner(Owner(namespace=namespace, uid=uid))

        self._reconciler.on_deleted_rollout.append(delete_objects)
        self._health = HealthServer(
            self.metrics, self.settings.bind_host, self.settings.metrics_port, ready=lambda: self._reconciler is not None
        )
        await self._health.start()
        self._ingest = IngestServer(
            self._reconciler, self._store, self.token_key, self.metrics, self._kube,
            host=self.settings.bind_host, port=self.settings.ingest_port,
        )
        await self._ingest.start()

    async def stop(self) -> None:
        for server in (self._ingest, self._health):
            if server:
                await server.stop()
        if self._store:
            await self._store.aclose()
        if self._kube:
            await self._kube.aclose()
