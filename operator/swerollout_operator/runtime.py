"""The long-lived parts of one operator process, created at startup and shared by handlers."""

from __future__ import annotations

from pathlib import Path

from swerollout.kube import AsyncKubeClient

from .http import HealthServer
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
        self._kube: AsyncKubeClient | None = None
        self._reconciler: Reconciler | None = None
        self._health: HealthServer | None = None

    @property
    def reconciler(self) -> Reconciler:
        if self._reconciler is None:
            raise RuntimeError("the operator runtime is not started")
        return self._reconciler

    async def start(self) -> None:
        self._kube = (
            AsyncKubeClient.from_kubeconfig(self.kubeconfig) if self.kubeconfig else AsyncKubeClient.in_cluster()
        )
        self._reconciler = Reconciler(self._kube, self.settings, self.token_key, self.metrics)
        self._health = HealthServer(
            self.metrics, self.settings.bind_host, self.settings.metrics_port, ready=lambda: self._reconciler is not None
        )
        await self._health.start()

    async def stop(self) -> None:
        if self._health:
            await self._health.stop()
        if self._kube:
            await self._kube.aclose()
