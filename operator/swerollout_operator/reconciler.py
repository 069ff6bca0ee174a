"""What the operator does for each SWERollout, independent of kopf.

Everything here is level-triggered and idempotent: it looks at what exists
(deterministically named Secret and pod) and makes it so, so that a restart at
any point — or the same event delivered twice — creates nothing twice and
loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase
from swerollout.kube import PODS, SECRETS, SWEROLLOUTS, AlreadyExists, AsyncKubeClient, NotFound

from . import phases, podspec
from .events import post_event
from .metrics import OperatorMetrics
from .phases import Event, IllegalTransition
from .podstatus import read_pod
from .settings import OperatorSettings
from .tokens import TokenKey, TokenKind

log = logging.getLogger(__name__)


@dataclass
class _Tracked:
    """In-memory view of one rollout, rebuilt from the API after a restart."""

    namespace: str
    name: str
    phase: Phase
    startup_deadline: float | None = None
    pod_created_at: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Reconciler:
    def __init__(
        self, kube: AsyncKubeClient, settings: OperatorSettings, token_key: TokenKey, metrics: OperatorMetrics
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.token_key = token_key
        self.metrics = metrics
        self._tracked: dict[str, _Tracked] = {}

    # -- bookkeeping -------------------------------------------------------------

    def _track(self, meta: dict[str, Any], phase: Phase) -> _Tracked:
        uid = meta["uid"]
        entry = self._tracked.get(uid)
        if entry is None:
            entry = self._tracked[uid] = _Tracked(meta["namespace"], meta["name"], phase)
        self._set_phase(entry, phase)
        return entry

    def _set_phase(self, entry: _Tracked, phase: Phase) -> None:
        entry.phase = phase
        self._refresh_phase_gauge()

    def _refresh_phase_gauge(self) -> None:
        counts = {p: 0 for p in Phase}
        for entry in self._tracked.values():
            counts[entry.phase] += 1
        for p, n in counts.items():
            self.metrics.rollouts.labels(p.value).set(n)

    def forget(self, uid: str) -> None:
        self._tracked.pop(uid, None)
        self._refresh_phase_gauge()

    # -- status ------------------------------------------------------------------

    async def transition(
        self,
        meta: dict[str, Any],
        event: Event,
        *,
        reason: str,
        message: str,
        extra: dict[str, Any] | None = None,
        warning: bool = False,
    ) -> bool:
        """Apply one phase-machine event. False when it no longer applies (already handled)."""
        entry = self._tracked.get(meta["uid"]) or self._track(meta, Phase.PENDING)
        async with entry.lock:
            # Read the current status: another handler of ours may have moved it.
            current = await self.kube.get(SWEROLLOUTS, meta["name"], meta["namespace"])
            if current["metadata"]["uid"] != meta["uid"]:
                return False
            try:
                change = phases.apply(
                    current.get("status"),
                    event,
                    reason=reason,
                    message=message,
                    generation=current["metadata"].get("generation"),
                    extra=extra,
                )
            except IllegalTransition as exc:
                log.debug("%s/%s: %s", meta["namespace"], meta["name"], exc)
                return False
            # A merge patch without resourceVersion: no 409 storms. The operator is
            # the only status writer and serializes its own writes per rollout.
            await self.kube.patch_status(SWEROLLOUTS, meta["name"], {"status": change.status_patch}, meta["namespace"])
            self.metrics.status_patches.inc()
            self._set_phase(entry, change.new)
            if change.new != change.old:
                self.metrics.transitions.labels(change.new.value).inc()
                await post_event(
                    self.kube, meta, reason=reason, message=f"{change.old.value} -> {change.new.value}: {message}",
                    warning=warning,
                )
            return True

    # -- create / adopt ----------------------------------------------------------

    async def ensure_rollout(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        rollout = api.SWERollout.model_validate({k: body[k] for k in ("apiVersion", "kind", "spec") if k in body})
        status = body.get("status") or {}
        phase = Phase(status.get("phase", Phase.PENDING.value))
        entry = self._track(meta, phase)
        if phase.is_terminal:
            return
        attempt = max(1, int(status.get("attempts") or 0))
        await self._ensure_secret(meta)
        if phase in (Phase.PENDING, Phase.STARTING):
            pod = await self._ensure_pod(rollout, meta, attempt)
            if entry.pod_created_at is None:
                entry.pod_created_at = time.monotonic()
            if entry.startup_deadline is None:
                entry.startup_deadline = time.monotonic() + rollout.spec.sandbox.startup_timeout_seconds
            if phase == Phase.PENDING:
                await self.transition(
                    meta,
                    Event.POD_CREATED,
                    reason="PodCreated",
                    message=f"pod {pod['metadata']['name']} created; waiting for the sandbox",
                    extra={
                        "attempts": attempt,
                        "sandbox": {"podName": pod["metadata"]["name"], "podUID": pod["metadata"]["uid"]},
                    },
                )
            await self.on_pod(pod)

    async def _ensure_secret(self, meta: dict[str, Any]) -> None:
        name = podspec.secret_name(meta["name"])
        try:
            existing = await self.kube.get(SECRETS, name, meta["namespace"])
        except NotFound:
            pass
        else:
            if _owned_by(existing, meta["uid"]):
                return
            # A leftover of a deleted rollout with the same name: replace it.
            await self.kube.delete(SECRETS, name, meta["namespace"], uid=existing["metadata"]["uid"])
        ident = (meta["namespace"], meta["name"], meta["uid"])
        secret = podspec.runner_secret(
            meta,
            ingest_token=self.token_key.derive(TokenKind.INGEST, *ident),
            swerex_token=self.token_key.derive(TokenKind.SWEREX, *ident),
        )
        try:
            await self.kube.create(SECRETS, secret, meta["namespace"])
        except AlreadyExists:
            pass

    async def _ensure_pod(self, rollout: api.SWERollout, meta: dict[str, Any], attempt: int) -> dict[str, Any]:
        manifest = podspec.rollout_pod(rollout, meta, self.settings, attempt=attempt)
        name = manifest["metadata"]["name"]
        for _ in range(3):
            try:
                existing = await self.kube.get(PODS, name, meta["namespace"])
            except NotFound:
                try:
                    created = await self.kube.create(PODS, manifest, meta["namespace"])
                except AlreadyExists:
                    continue  # created concurrently; adopt it on the next pass
                self.metrics.pods_created.labels("rollout").inc()
                return created
            if _owned_by(existing, meta["uid"]):
                return existing  # adopt
            log.warning("deleting pod %s/%s left over from an older rollout of the same name", meta["namespace"], name)
            await self.kube.delete(PODS, name, meta["namespace"], uid=existing["metadata"]["uid"], grace_period_seconds=0)
            await asyncio.sleep(0.5)
        raise RuntimeError(f"could not create or adopt pod {meta['namespace']}/{name}")

    # -- pods --------------------------------------------------------------------

    async def on_pod(self, pod: dict[str, Any]) -> None:
        """React to a rollout pod's status (from a watch event or after creating it)."""
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == api.KIND and o.get("controller")),
            None,
        )
        if owner is None:
            return
        entry = self._tracked.get(owner["uid"])
        if entry is None or entry.phase != Phase.STARTING:
            return
        meta = {"namespace": pod["metadata"]["namespace"], "name": owner["name"], "uid": owner["uid"]}
        state = read_pod(pod)
        if state.ready:
            if entry.pod_created_at is not None:
                self.metrics.sandbox_startup.observe(time.monotonic() - entry.pod_created_at)
            await self.transition(
                meta,
                Event.SANDBOX_READY,
                reason="SandboxReady",
                message=f"pod {pod['metadata']['name']} is ready on {state.node_name}",
                extra={
                    "sandbox": {
                        "podName": pod["metadata"]["name"],
                        "podUID": pod["metadata"]["uid"],
                        "podIP": state.pod_ip,
                        "nodeName": state.node_name,
                        "startedAt": phases.now(),
                    }
                },
            )
        elif state.failed:
            self.metrics.startup_failures.labels(state.reason).inc()
            await self.transition(
                meta, Event.STARTUP_FAILED, reason=state.reason, message=state.message, warning=True
            )

    async def check_startup_deadlines(self) -> None:
        """Fail rollouts whose sandbox did not become ready in time, with the pod's own reason."""
        now = time.monotonic()
        for uid, entry in list(self._tracked.items()):
            if entry.phase != Phase.STARTING or entry.startup_deadline is None or now < entry.startup_deadline:
                continue
            meta = {"namespace": entry.namespace, "name": entry.name, "uid": uid}
            pod_name = podspec.rollout_pod_name(entry.name, 1)
            detail = "the pod does not exist"
            try:
                body = await self.kube.get(SWEROLLOUTS, entry.name, entry.namespace)
                pod_name = ((body.get("status") or {}).get("sandbox") or {}).get("podName") or pod_name
                pod = await self.kube.get(PODS, pod_name, entry.namespace)
                state = read_pod(pod)
                detail = f"{state.reason}: {state.message}" if state.message else state.reason
            except NotFound:
                pass
            self.metrics.startup_failures.labels("Timeout").inc()
            await self.transition(
                meta,
                Event.STARTUP_FAILED,
                reason="StartupTimeout",
                message=f"sandbox pod {pod_name} not ready within startupTimeoutSeconds ({detail})",
                warning=True,
            )

    # -- deletion ----------------------------------------------------------------

    async def cleanup(self, body: dict[str, Any]) -> None:
        """Delete everything the rollout made. Owner references would do it in a full
        cluster, but the finalizer makes it immediate and also works where no garbage
        collector runs (the embedded dev mode)."""
        meta = body["metadata"]
        selector = f"{api.LABEL_ROLLOUT}={meta['name']}"
        async for pod in self.kube.iter_items(PODS, meta["namespace"], label_selector=selector):
            if _owned_by(pod, meta["uid"]):
                try:
                    await self.kube.delete(PODS, pod["metadata"]["name"], meta["namespace"], uid=pod["metadata"]["uid"])
                except NotFound:
                    pass
        try:
            secret = await self.kube.get(SECRETS, podspec.secret_name(meta["name"]), meta["namespace"])
            if _owned_by(secret, meta["uid"]):
                await self.kube.delete(SECRETS, secret["metadata"]["name"], meta["namespace"], uid=secret["metadata"]["uid"])
        except NotFound:
            pass
        self.forget(meta["uid"])


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])
