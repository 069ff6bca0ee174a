"""The asyncio trainer client: submit a batch, wait, abort/resume, collect results.

    async with AsyncRolloutClient.connect(store_url="file:///data/results") as client:
        await client.submit_batch(instances, 8, batch="step-0042", inference={...})
        await client.wait("step-0042", progress=print)
        records = await client.results("step-0042")

Every Kubernetes call goes through :mod:`swerollout.kube`; every failure surfaces
as a :class:`~swerollout.client.errors.ClientError` naming the fix.

This module is the facade: the operations live in submit.py, suspend.py and fetch.py,
the state and the shared reads in core.py.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from swerollout.client.core import FIELD_MANAGER, INFERENCE_ADMIN_KEY_ENV, Object, log
from swerollout.client.errors import ClientConfigError
from swerollout.client.fetch import Fetching, ProgressCallback
from swerollout.client.submit import InstanceLike, Submitting, TrainerLabel, check_inference_endpoint
from swerollout.client.suspend import Suspending
from swerollout.kube import AsyncKubeClient, ConfigError, load_config

__all__ = [
    "FIELD_MANAGER",
    "INFERENCE_ADMIN_KEY_ENV",
    "AsyncRolloutClient",
    "InstanceLike",
    "Object",
    "ProgressCallback",
    "TrainerLabel",
    "check_inference_endpoint",
    "log",
]


class AsyncRolloutClient(Submitting, Suspending, Fetching):
    """Creates and follows SWERollouts of one namespace.

    ``store_url`` (the result store the operator writes to, e.g. ``file:///data``
    or ``s3://bucket/prefix``) or ``results_url`` (the operator's ingest URL, which
    serves ``/v1/results/...`` to callers with a Kubernetes bearer token) tells
    ``results`` where to fetch trajectories from; the store wins when both are set.
    """

    @classmethod
    def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> AsyncRolloutClient:
        """Build from ``kubeconfig``, else $KUBECONFIG, else ~/.kube/config, else the pod's identity."""
        try:
            config = load_config(kubeconfig, context=context)
        except ConfigError as exc:
            raise ClientConfigError(
                f"no usable Kubernetes configuration: {exc}. Pass --kubeconfig PATH (kubeconfig=), set "
                "KUBECONFIG, or run `swerollout dev up` for a local cluster"
            ) from exc
        return cls(AsyncKubeClient(config), namespace, owns_kube=True, **options)

    @classmethod
    def in_cluster(
        cls, token_dir: str | os.PathLike[str] | None = None, *, namespace: str | None = None, **options: Any
    ) -> AsyncRolloutClient:
        """Build from the pod's ServiceAccount (token, ca.crt and namespace under ``token_dir``)."""
        try:
            kube = AsyncKubeClient.in_cluster(token_dir)
        except ConfigError as exc:
            raise ClientConfigError(
                f"the in-cluster identity is not usable: {exc}. Outside a pod, use connect(kubeconfig=...)"
            ) from exc
        return cls(kube, namespace, owns_kube=True, **options)

    async def aclose(self) -> None:
        if self._watch is not None:
            await self._watch.aclose()
            self._watch = None
        if self._store is not None:
            await self._store.aclose()
            self._store = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._owns_kube:
            await self.kube.aclose()

    async def __aenter__(self) -> AsyncRolloutClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()
