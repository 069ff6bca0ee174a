"""The operator's own HTTP endpoints: /metrics, /healthz, /readyz."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import OperatorMetrics


class HealthServer:
    def __init__(self, metrics: OperatorMetrics, host: str, port: int, ready: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self._heartbeat = time.monotonic()
        self._beat_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        self._beat_task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        if self._beat_task:
            self._beat_task.cancel()
        if self._runner:
            await self._runner.cleanup()

    async def _beat(self) -> None:
        while True:
            self._heartbeat = time.monotonic()
            await asyncio.sleep(1)

    async def _serve_metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        # A stalled event loop (the failure mode that leaves every rollout stuck) shows
        # up as a stale heartbeat, and the liveness probe restarts the operator.
        lag = time.monotonic() - self._heartbeat
        if lag > 30:
            return web.Response(status=503, text=f"event loop stalled for {lag:.0f}s\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if not self._ready():
            return web.Response(status=503, text="not ready\n")
        return web.Response(text="ok\n")
