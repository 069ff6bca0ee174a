"""Ensuring a rollout's Secret and pods exist (create or adopt), and deleting them.

Reads come from the pod cache; the API server is asked only on a cache miss for
a pod that should exist (right after a restart, before the watch caught up), so
a steady-state reconcile reads nothing. Names are deterministic, so a create that
races another (or a restart) ends in AlreadyExists and adoption, never a second pod.
"""

from __future__ import annotations

import logging
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.api.labels import rollout_label
from swerollout.backoff import Backoff
from swerollout.kube import (
    PODS,
    SECRETS,
    AlreadyExists,
    AsyncKubeClient,
    BadRequest,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
)

from . import podspec
from .cache import PodCache, Tracked
from .metrics import OperatorMetrics
from .settings import OperatorSettings
from .tokens import TokenKey, TokenKind

log = logging.getLogger(__name__)


class Rejected(Exception):
    """The API server refused to create one of the rollout's objects, for good (400/422):
    the same request can never succeed, so the rollout fails with the server's reason."""

    def __init__(self, kind: str, name: str, exc: KubeError) -> None:
        super().__init__(f"the API server rejected {kind} {name}: {exc.message or exc}")
        self.reason = f"{kind}Rejected"


class QuotaRefused(Exception):
    """The API server refused the pod for a ResourceQuota of the namespace (403): the same
    create succeeds once other pods free the quota, so the rollout waits Queued."""

    def __init__(self, name: str, exc: KubeError) -> None:
        super().__init__(f"the API server refused pod {name} for quota: {exc.message or exc}")


QUOTA_MESSAGES = ("exceeded quota", "status unknown for quota")
POD_NAME_BACKOFF = Backoff(first_seconds=0.5, max_seconds=2.0, attempts=3)
"""ensure_pod's tries when a leftover pod held the name (deleted, then created again)."""


class _NameTaken(Exception):
    """Another pod held the name (now being deleted), or one vanished under us: try again."""


"""How the quota admission plugin words a refusal (k8s.io/apiserver's resourcequota
plugin): over a limit, or the quota's usage not computed yet by the controller-manager.
A 403 says nothing more specific (its reason is Forbidden, as for RBAC)."""


def is_quota_refusal(exc: KubeError) -> bool:
    return isinstance(exc, Forbidden) and any(m in (exc.message or "") for m in QUOTA_MESSAGES)


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])


class Objects:
    def __init__(
        self,
        kube: AsyncKubeClient,
        pods: PodCache,
        settings: OperatorSettings,
        token_key: TokenKey,
        metrics: OperatorMetrics,
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.settings = settings
        self.token_key = token_key
        self.metrics = metrics

    async def ensure_secret(self, entry: Tracked) -> None:
        if entry.secret_ready:
            return
        name = podspec.secret_name(entry.name)
        ident = (entry.namespace, entry.name, entry.uid)
        secret = podspec.runner_secret(
            entry.meta,
            ingest_token=self.token_key.derive(TokenKind.INGEST, *ident),
            swerex_token=self.token_key.derive(TokenKind.SWEREX, *ident),
        )
        for _ in range(3):
            try:
                await self.kube.create(SECRETS, secret, entry.namespace)
                entry.secret_ready = True
                return
            except AlreadyExists:
                pass
            except (Invalid, BadRequest) as exc:
                raise Rejected("Secret", name, exc) from exc
            try:
                existing = await self.kube.get(SECRETS, name, entry.namespace)
            except NotFound:
                continue
            if owned_by(existing, entry.uid):
                entry.secret_ready = True
                return
            # A leftover of a deleted rollout with the same name: replace it.
            await self.kube.delete(SECRETS, name, entry.namespace, uid=existing["metadata"]["uid"])
        raise RuntimeError(f"could not create or adopt Secret {entry.namespace}/{name}")

    async def pod(self, entry: Tracked, name: str) -> dict[str, Any] | None:
        """The pod by name: from the cache, or (cache miss) from the API server."""
        cached = self.pods.get(entry.namespace, name)
        if cached is not None:
            return cached
        try:
            pod = await self.kube.get(PODS, name, entry.namespace)
        except NotFound:
            return None
        self.pods.update(pod)
        return pod

    async def ensure_pod(self, entry: Tracked, attempt: int, *, role: str) -> dict[str, Any]:
        rollout = api.SWERollout.model_construct(spec=entry.rollout_spec)
        manifest = podspec.rollout_pod(rollout, entry.meta, self.settings, attempt=attempt, role=role)
        try:
            async for tried in POD_NAME_BACKOFF.retrying(retryable=lambda exc: isinstance(exc, _NameTaken)):
                with tried:
                    return await self._create_or_adopt(entry, manifest, role=role)
        except _NameTaken:
            pass
        raise RuntimeError(f"could not create or adopt pod {entry.namespace}/{manifest['metadata']['name']}")

    async def _create_or_adopt(self, entry: Tracked, manifest: dict[str, Any], *, role: str) -> dict[str, Any]:
        """One try of ensure_pod: create the pod, or adopt ours; _NameTaken when another
        pod held the name (deleted now) or one vanished between our create and our read."""
        name = manifest["metadata"]["name"]
        existing = self.pods.get(entry.namespace, name)
        if existing is None:
            try:
                created = await self.kube.create(PODS, manifest, entry.namespace)
            except AlreadyExists:
                # Made before this process saw it (a restart): adopt what is there.
                try:
                    existing = await self.kube.get(PODS, name, entry.namespace)
                except NotFound:
                    raise _NameTaken(name) from None
                self.pods.update(existing)
            except (Invalid, BadRequest) as exc:
                raise Rejected("Pod", name, exc) from exc
            except Forbidden as exc:
                if is_quota_refusal(exc):
                    raise QuotaRefused(name, exc) from exc
                raise
            else:
                self.metrics.pods_created.labels(role).inc()
                self.pods.update(created)
                entry.quota_retries = 0
                return created
        if owned_by(existing, entry.uid):
            entry.quota_retries = 0
            return existing  # adopt
        log.warning("deleting pod %s/%s left over from an older rollout of the same name", entry.namespace, name)
        try:
            await self.kube.delete(PODS, name, entry.namespace, uid=existing["metadata"]["uid"], grace_period_seconds=0)
        except NotFound:
            pass
        self.pods.update(existing, deleted=True)
        raise _NameTaken(name)

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            answer = await self.kube.delete(PODS, name, namespace)
        except NotFound:
            return
        # The answer is the pod as the deletion left it (terminating): the cache knows at
        # once, so a pass that comes before the watch's echo (the eval pod's own events
        # queue several) skips it instead of deleting it again.
        if answer.get("kind") == "Pod":
            self.pods.update(answer, deleted=not answer["metadata"].get("deletionTimestamp"))

    async def delete_pods(self, entry: Tracked) -> None:
        """Delete every pod of the rollout that the cache knows and that is not going already."""
        for pod in self.pods.owned_by(entry.uid):
            if not pod["metadata"].get("deletionTimestamp"):
                await self.delete_pod(entry.namespace, pod["metadata"]["name"])

    async def delete_all(self, meta: dict[str, Any]) -> None:
        """Finalizer: everything the rollout made, listed from the API server (not the cache,
        which may be cold after a restart). The selector is bounded (rollout_label), so it
        is always valid, whatever the name's length."""
        selector = f"{api.LABEL_ROLLOUT}={rollout_label(meta['name'])}"
        async for pod in self.kube.iter_items(PODS, meta["namespace"], label_selector=selector):
            if owned_by(pod, meta["uid"]):
                await self.delete_pod(meta["namespace"], pod["metadata"]["name"])
        try:
            secret = await self.kube.get(SECRETS, podspec.secret_name(meta["name"]), meta["namespace"])
            if owned_by(secret, meta["uid"]):
                await self.kube.delete(
                    SECRETS, secret["metadata"]["name"], meta["namespace"], uid=secret["metadata"]["uid"]
                )
        except NotFound:
            pass
