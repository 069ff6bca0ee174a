"""What every part of the trainer client shares: the cluster it talks to and the reads.

`ClientCore` holds the client's state (the Kubernetes client, the namespace, the batch
object writer, the result-store and watch handles) and the reads that submit, suspend and
fetch all need: the pre-flight check, listing and reading rollouts, the batch objects, and
following a batch. The operations themselves live in submit.py, suspend.py and fetch.py;
aclient.AsyncRolloutClient is their facade.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any

import httpx

from swerollout.api.v1alpha1 import BATCH_PLURAL, GROUP, LABEL_BATCH, PLURAL, VERSION, SWERolloutBatchSpec
from swerollout.client.batches import BatchWriter
from swerollout.client.errors import (
    ClientConfigError,
    ClientError,
    CrdNotInstalled,
    KubeApiError,
    NamespaceNotFound,
    RolloutNotFound,
    UnknownBatch,
)
from swerollout.client.records import parse_status
from swerollout.client.watch import Listed, SharedWatch, list_and_watch
from swerollout.kube import (
    NAMESPACES,
    SWEROLLOUTS,
    AsyncKubeClient,
    ConfigError,
    Forbidden,
    KubeError,
    NotFound,
    aretry,
)
from swerollout.store.protocol import ResultStore

FIELD_MANAGER = "swerollout-client"
Object = dict[str, Any]
# One logger for the whole client (its name is the one trainers configure).
log = logging.getLogger("swerollout.client.aclient")

# Parallel requests for submit/abort/resume/results (the API server throttles beyond this).
PARALLEL_REQUESTS = 16
# Parallel abort/resume marks and deletes: small requests, and a batch abort should land in seconds.
MARK_PARALLEL_REQUESTS = 64
# The inference servers' admin key for abort(batch), when the caller passes none.
INFERENCE_ADMIN_KEY_ENV = "SWEROLLOUT_INFERENCE_ADMIN_KEY"


def kube_error(exc: KubeError, doing: str) -> ClientError:
    if isinstance(exc, ConfigError):
        return ClientConfigError(f"{doing}: {exc}")
    return KubeApiError(f"{doing}: {exc}", retryable=exc.retryable)


def name_of(obj: Object) -> str:
    return str(obj["metadata"]["name"])


def unfinished(obj: Object) -> bool:
    return not parse_status(obj).phase.is_terminal


def own_suspend(obj: Object) -> bool:
    """The rollout's own spec.suspend (its batch may suspend it as well)."""
    return bool((obj.get("spec") or {}).get("suspend"))


class ClientCore:
    """The state of one client of one namespace, and the reads its operations share."""

    def __init__(
        self,
        kube: AsyncKubeClient,
        namespace: str | None = None,
        *,
        store_url: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        results_url: str | None = None,
        results_token: str | None = None,
        inference_admin_key: str | None = None,
        owns_kube: bool = False,
    ) -> None:
        self.kube = kube
        self.namespace = namespace or kube.config.namespace
        self.store_url = store_url
        self._store_options = dict(store_options or {})
        self.results_url = results_url.rstrip("/") if results_url else None
        self._results_token = results_token
        self._inference_admin_key = inference_admin_key or os.environ.get(INFERENCE_ADMIN_KEY_ENV) or None
        self._owns_kube = owns_kube
        self._store: ResultStore | None = None
        self._http: httpx.AsyncClient | None = None
        self._checked = False
        self._batch_crd = False
        """Whether the API server serves SWERolloutBatch (else batch abort/resume marks each member)."""
        self._batches = BatchWriter(kube, self.namespace, FIELD_MANAGER)
        self._batches_checked: set[str] = set()
        """Batches whose object submit found fit for new members (one read per batch)."""
        self._watch: SharedWatch | None = None

    async def check_cluster(self) -> None:
        """Fail with a clear error when the CRD is missing or the namespace does not exist."""
        if self._checked:
            return
        try:
            group = await self.kube.request("GET", f"/apis/{GROUP}/{VERSION}")
        except NotFound:
            raise CrdNotInstalled(
                f"the API server does not serve {PLURAL}.{GROUP}/{VERSION}: install the CRD "
                "(kubectl apply --server-side -f crds/, or helm install swerollout helm/swerollout)"
            ) from None
        except KubeError as exc:
            raise kube_error(exc, "checking that the SWERollout CRD is installed") from exc
        if not any(r.get("name") == PLURAL for r in group.get("resources") or []):
            raise CrdNotInstalled(f"{GROUP}/{VERSION} does not list {PLURAL}: install the current CRD from crds/")
        self._batch_crd = any(r.get("name") == BATCH_PLURAL for r in group.get("resources") or [])
        try:
            await self.kube.get(NAMESPACES, self.namespace)
        except NotFound:
            raise NamespaceNotFound(
                f"namespace {self.namespace!r} does not exist: pass the right one (--namespace / namespace=) "
                "or create it (kubectl create namespace ...)"
            ) from None
        except Forbidden:
            pass  # callers limited to their namespace may not read Namespace objects
        except KubeError as exc:
            raise kube_error(exc, f"checking namespace {self.namespace!r}") from exc
        self._checked = True

    async def list_rollouts(self, batch: str | None = None) -> list[Object]:
        """The SWERollouts of the namespace (of one batch when given), sorted by name."""
        await self.check_cluster()
        selector = f"{LABEL_BATCH}={batch}" if batch else None
        try:
            # Reads are idempotent: ride out a reset, 429 or 5xx as the marks do.
            items = await aretry(lambda: self._listed(selector))
        except KubeError as exc:
            raise kube_error(exc, f"listing SWERollouts in {self.namespace}") from exc
        return sorted(items, key=lambda o: str(o["metadata"]["name"]))

    async def _listed(self, selector: str | None) -> list[Object]:
        return [o async for o in self.kube.iter_items(SWEROLLOUTS, self.namespace, label_selector=selector)]

    async def get_rollout(self, name: str) -> Object:
        await self.check_cluster()
        try:
            return await aretry(lambda: self.kube.get(SWEROLLOUTS, name, self.namespace))
        except NotFound:
            raise RolloutNotFound(
                f"no SWERollout named {name!r} in namespace {self.namespace!r}; `swerollout list` shows what exists"
            ) from None
        except KubeError as exc:
            raise kube_error(exc, f"reading SWERollout {name}") from exc

    async def members(self, batch: str) -> list[Object]:
        """The batch's SWERollouts; UnknownBatch when there are none."""
        items = await self.list_rollouts(batch)
        if not items:
            raise self._unknown_batch(batch)
        return items

    async def batch_specs(self) -> dict[str, SWERolloutBatchSpec]:
        """The namespace's SWERolloutBatch specs by name (one LIST): with
        :func:`~swerollout.client.progress.member_state` they tell who is suspended. Empty
        where the CRD is not installed or the identity may not list them (warned)."""
        await self.check_cluster()
        return await self._batches.all_if_allowed() if self._batch_crd else {}

    async def batch_spec(self, batch: str) -> SWERolloutBatchSpec | None:
        """The spec of the batch's SWERolloutBatch; None when it has none (or the CRD is
        not installed, or the identity may not read it: warned)."""
        await self.check_cluster()
        return await self._batches.get_if_allowed(batch) if self._batch_crd else None

    def _unknown_batch(self, batch: str) -> UnknownBatch:
        return UnknownBatch(
            f"batch {batch!r} has no SWERollouts in namespace {self.namespace!r} (label {LABEL_BATCH}={batch}); "
            "check the batch name and --namespace, `swerollout list` shows the batches that exist"
        )

    async def _has_members(self, batch: str) -> bool:
        """Whether any SWERollout carries the batch's label: one small read (limit=1)."""
        try:
            page = await aretry(
                lambda: self.kube.list(SWEROLLOUTS, self.namespace, label_selector=f"{LABEL_BATCH}={batch}", limit=1)
            )
        except KubeError as exc:
            raise kube_error(exc, f"listing the members of batch {batch}") from exc
        return bool(page.get("items"))

    async def _observe(self, batch: str) -> AsyncGenerator[list[Object], None]:
        """The batch's members now, then again after every change (see watch.list_and_watch)."""
        await self.check_cluster()
        items: dict[str, Object] = {}
        try:
            async with aclosing(list_and_watch(self.kube, self.namespace, f"{LABEL_BATCH}={batch}")) as changes:
                async for change in changes:
                    if isinstance(change, Listed):
                        items = dict(change.items)
                        if not items:
                            raise self._unknown_batch(batch)
                    elif change.deleted:
                        items.pop(change.name, None)
                        if not items:
                            raise UnknownBatch(f"every member of batch {batch!r} was deleted while following it")
                    else:
                        items[change.name] = change.obj
                    yield list(items.values())
        except KubeError as exc:
            raise kube_error(exc, f"watching batch {batch}") from exc
