"""What the operator does for each SWERollout, independent of kopf.

Everything here is level-triggered and idempotent: `reconcile` looks at the
rollout and at what exists (deterministically named Secret and pods) and makes
it so. A restart at any point, or the same event delivered twice, creates
nothing twice and loses nothing. Runner reports (ingest API) enter through
`on_runner_event`, which only ever applies phase-machine events — so a repeated
report is refused by the machine, not applied twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import Phase
from swerollout.kube import PODS, SECRETS, SWEROLLOUTS, AlreadyExists, AsyncKubeClient, KubeError, NotFound
from swerollout.exit_status import gate_exit_status, metric_label
from swerollout.wire.ingest import Ack, EventKind, ProgressReport, RunnerEvent, StoredObjectRef

from . import phases, podspec
from .events import post_event
from .metrics import OperatorMetrics, abort_reason_label
from .phases import Event, IllegalTransition
from .podstatus import read_pod
from .settings import OperatorSettings
from .tokens import TokenKey, TokenKind

log = logging.getLogger(__name__)
MAX_EVAL_ATTEMPTS = 2
MAX_ROLLOUT_ATTEMPTS = 5


@dataclass
class Tracked:
    """In-memory view of one rollout, rebuilt from the API after a restart."""

    namespace: str
    name: str
    uid: str
    body: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    startup_deadline: float | None = None
    pod_created_at: float | None = None
    cleaned_up: bool = False
    progress: ProgressReport | None = None
    progress_dirty: bool = False
    progress_written_at: float = 0.0
    generated_reported: int = 0

    @property
    def phase(self) -> Phase:
        return Phase((self.body.get("status") or {}).get("phase", Phase.PENDING.value))

    @property
    def meta(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "labels": (self.body.get("metadata") or {}).get("labels") or {},
        }

    @property
    def status(self) -> dict[str, Any]:
        return self.body.get("status") or {}

    @property
    def spec(self) -> dict[str, Any]:
        return self.body.get("spec") or {}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _object_ref(ref: StoredObjectRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"ref": ref.ref, "sha256": ref.sha256, "bytes": ref.bytes}


class Reconciler:
    def __init__(
        self, kube: AsyncKubeClient, settings: OperatorSettings, token_key: TokenKey, metrics: OperatorMetrics
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.token_key = token_key
        self.metrics = metrics
        self.tracked: dict[str, Tracked] = {}
        self.on_deleted_rollout: list[Any] = []

    # -- bookkeeping -------------------------------------------------------------

    def observe(self, body: dict[str, Any]) -> Tracked:
        """Remember the latest state of a rollout (from a watch event or our own patch)."""
        meta = body["metadata"]
        entry = self.tracked.get(meta["uid"])
        if entry is None:
            entry = self.tracked[meta["uid"]] = Tracked(meta["namespace"], meta["name"], meta["uid"], body)
        else:
            # Watch events can arrive out of order with our own patch responses.
            old_rv = int(entry.body.get("metadata", {}).get("resourceVersion") or 0)
            new_rv = int(meta.get("resourceVersion") or 0)
            if new_rv >= old_rv:
                entry.body = body
        self._refresh_phase_gauge()
        return entry

    async def notify(self, entry: Tracked) -> None:
        async with entry.changed:
            entry.changed.notify_all()

    def _refresh_phase_gauge(self) -> None:
        counts = {p: 0 for p in Phase}
        for entry in self.tracked.values():
            counts[entry.phase] += 1
        for p, n in counts.items():
            self.metrics.rollouts.labels(p.value).set(n)

    def forget(self, uid: str) -> None:
        self.tracked.pop(uid, None)
        self._refresh_phase_gauge()

    def lookup(self, namespace: str, name: str, uid: str) -> Tracked | None:
        entry = self.tracked.get(uid)
        if entry is None or entry.namespace != namespace or entry.name != name:
            return None
        return entry

    async def lookup_or_fetch(self, namespace: str, name: str, uid: str) -> Tracked | None:
        """The rollout, read from the API server when this process has not seen it yet
        (right after a restart, runners can call before the first listing arrives)."""
        entry = self.lookup(namespace, name, uid)
        if entry is not None:
            return entry
        try:
            body = await self.kube.get(SWEROLLOUTS, name, namespace)
        except NotFound:
            return None
        if body["metadata"]["uid"] != uid or body["metadata"].get("deletionTimestamp"):
            return None
        return self.observe(body)

    # -- status ------------------------------------------------------------------

    async def _patch_status(self, entry: Tracked, patch: dict[str, Any]) -> None:
        # A merge patch without resourceVersion: no 409 storms. The operator is the
        # only status writer and serializes its own writes per rollout (entry.lock).
        body = await self.kube.patch_status(SWEROLLOUTS, entry.name, {"status": patch}, entry.namespace)
        self.metrics.status_patches.inc()
        self.observe(body)
        await self.notify(entry)

    async def transition(
        self,
        entry: Tracked,
        event: Event,
        *,
        reason: str,
        message: str,
        extra: dict[str, Any] | None = None,
        warning: bool = False,
    ) -> bool:
        """Apply one phase-machine event (call with entry.lock held). False when it no longer applies."""
        try:
            change = phases.apply(
                entry.status,
                event,
                reason=reason,
                message=message,
                generation=(entry.body.get("metadata") or {}).get("generation"),
                extra=extra,
            )
        except IllegalTransition as exc:
            log.debug("%s/%s: %s", entry.namespace, entry.name, exc)
            return False
        await self._patch_status(entry, change.status_patch)
        if change.new != change.old:
            self.metrics.transitions.labels(change.new.value).inc()
            log.info("%s/%s: %s -> %s (%s)", entry.namespace, entry.name, change.old.value, change.new.value, reason)
            await post_event(
                self.kube, entry.meta, reason=reason, message=f"{change.old.value} -> {change.new.value}: {message}",
                warning=warning,
            )
            if change.new.is_terminal:
                self._observe_completion(entry)
        return True

    def _observe_completion(self, entry: Tracked) -> None:
        start = _parse_time(entry.status.get("startTime"))
        if start is not None:
            self.metrics.rollout_duration.observe((_utcnow() - start).total_seconds())
        reward = entry.status.get("reward") or {}
        if reward.get("graded"):
            self.metrics.rewards.observe(float(reward.get("value") or 0.0))
            self.metrics.resolved.labels("true" if reward.get("resolved") else "false").inc()
        result = entry.status.get("result") or {}
        if result:
            self.metrics.turns.observe(int(result.get("turns") or 0))
            self.metrics.exit_statuses.labels(metric_label(str(result.get("exitStatus", "")))).inc()

    # -- the level-triggered reconcile -------------------------------------------

    async def reconcile(self, body: dict[str, Any]) -> None:
        entry = self.observe(body)
        if body["metadata"].get("deletionTimestamp"):
            return
        async with entry.lock:
            phase = entry.phase
            if phase.is_terminal:
                await self._cleanup_pods(entry, terminal=True)
                return
            if not await self._spec_is_valid(entry):
                return
            await self._ensure_secret(entry)
            if phase in (Phase.PENDING, Phase.STARTING):
                await self._ensure_started(entry)
            elif phase == Phase.ABORTED:
                await self._reconcile_aborted(entry)
            elif phase == Phase.RESUMING:
                await self._ensure_resume_pod(entry)
            elif phase == Phase.EVALUATING:
                await self._ensure_eval_pod(entry)
        await self.notify(entry)

    async def _spec_is_valid(self, entry: Tracked) -> bool:
        """The CRD cannot check everything the API model does (e.g. template variables): a
        spec the model refuses fails the rollout as InvalidSpec, before any pod exists."""
        try:
            api.SWERolloutSpec.model_validate(entry.spec)
        except ValidationError as exc:
            await self.transition(
                entry, Event.FAILED, reason="InvalidSpec",
                message=f"{one_line(exc)}; fix it and create the rollout again", warning=True,
            )
            return False
        return True

    async def _ensure_started(self, entry: Tracked) -> None:
        rollout = api.SWERollout.model_validate({"spec": entry.spec})
        attempt = max(1, int(entry.status.get("attempts") or 0))
        pod = await self._ensure_pod(entry, rollout, attempt, role="rollout")
        if entry.pod_created_at is None:
            entry.pod_created_at = time.monotonic()
        if entry.startup_deadline is None:
            entry.startup_deadline = time.monotonic() + rollout.spec.sandbox.startup_timeout_seconds
        if entry.phase == Phase.PENDING:
            await self.transition(
                entry,
                Event.POD_CREATED,
                reason="PodCreated",
                message=f"pod {pod['metadata']['name']} created; waiting for the sandbox",
                extra={"attempts": attempt, "sandbox": {"podName": pod["metadata"]["name"], "podUID": pod["metadata"]["uid"]}},
            )
        await self._on_rollout_pod(entry, pod)

    async def _reconcile_aborted(self, entry: Tracked) -> None:
        if not entry.spec.get("suspend"):
            await self.transition(entry, Event.RESUME_REQUESTED, reason="ResumeRequested", message="spec.suspend is false")
            await self._ensure_resume_pod(entry)
            return
        # Keep the live pod for a resume, but not forever.
        partial = entry.status.get("partial") or {}
        aborted_at = _parse_time(partial.get("abortedAt"))
        keep = int((entry.spec.get("sandbox") or {}).get("keepAliveSecondsAfterAbort", 1800))
        sandbox = entry.status.get("sandbox") or {}
        if aborted_at is None or sandbox.get("reclaimedAt"):
            return
        if (_utcnow() - aborted_at).total_seconds() >= keep:
            pod_name = sandbox.get("podName")
            if pod_name:
                await self._delete_pod(entry.namespace, pod_name)
            await self._patch_status(
                entry,
                {
                    "sandbox": {**sandbox, "reclaimedAt": phases.now()},
                    "message": f"pod {pod_name} reclaimed after keepAliveSecondsAfterAbort ({keep}s); "
                    "a resume replays the recorded actions into a fresh pod",
                },
            )
            await post_event(self.kube, entry.meta, reason="SandboxReclaimed", message=f"pod {pod_name} deleted after {keep}s aborted")

    async def _ensure_resume_pod(self, entry: Tracked) -> None:
        """Resume on the same pod when it is alive; otherwise replay into a fresh one."""
        sandbox = entry.status.get("sandbox") or {}
        attempt = max(1, int(entry.status.get("attempts") or 1))
        alive = False
        pod_name = sandbox.get("podName")
        if pod_name and not sandbox.get("reclaimedAt"):
            try:
                pod = await self.kube.get(PODS, pod_name, entry.namespace)
                alive = _owned_by(pod, entry.uid) and not pod["metadata"].get("deletionTimestamp") and not read_pod(pod).failed
            except NotFound:
                alive = False
        if alive:
            return
        attempt += 1
        if attempt > MAX_ROLLOUT_ATTEMPTS:
            await self.transition(
                entry, Event.FAILED, reason="TooManyAttempts",
                message=f"the sandbox pod was lost {attempt - 1} times; giving up", warning=True,
            )
            return
        rollout = api.SWERollout.model_validate({"spec": entry.spec})
        pod = await self._ensure_pod(entry, rollout, attempt, role="rollout")
        self.metrics.replays.inc()
        await self.transition(
            entry,
            Event.REPLAY_STARTED,
            reason="ReplayStarted",
            message=f"the sandbox pod was gone; replaying the recorded actions into {pod['metadata']['name']}",
            extra={
                "attempts": attempt,
                "replay": True,
                # A merge patch: null clears what described the old pod.
                "sandbox": {
                    "podName": pod["metadata"]["name"], "podUID": pod["metadata"]["uid"],
                    "podIP": None, "nodeName": None, "startedAt": None, "reclaimedAt": None,
                },
            },
        )

    async def _ensure_eval_pod(self, entry: Tracked) -> None:
        evaluation = entry.status.get("evaluation") or {}
        attempt = int(evaluation.get("attempt") or 1)
        rollout = api.SWERollout.model_validate({"spec": entry.spec})
        pod = await self._ensure_pod(entry, rollout, attempt, role="eval")
        if evaluation.get("podName") != pod["metadata"]["name"]:
            await self._patch_status(
                entry, {"evaluation": {"attempt": attempt, "podName": pod["metadata"]["name"], "startedAt": phases.now()}}
            )

    async def _ensure_secret(self, entry: Tracked) -> None:
        name = podspec.secret_name(entry.name)
        try:
            existing = await self.kube.get(SECRETS, name, entry.namespace)
        except NotFound:
            pass
        else:
            if _owned_by(existing, entry.uid):
                return
            # A leftover of a deleted rollout with the same name: replace it.
            await self.kube.delete(SECRETS, name, entry.namespace, uid=existing["metadata"]["uid"])
        ident = (entry.namespace, entry.name, entry.uid)
        secret = podspec.runner_secret(
            entry.meta,
            ingest_token=self.token_key.derive(TokenKind.INGEST, *ident),
            swerex_token=self.token_key.derive(TokenKind.SWEREX, *ident),
        )
        try:
            await self.kube.create(SECRETS, secret, entry.namespace)
        except AlreadyExists:
            pass

    async def _ensure_pod(self, entry: Tracked, rollout: api.SWERollout, attempt: int, *, role: str) -> dict[str, Any]:
        manifest = podspec.rollout_pod(rollout, entry.meta, self.settings, attempt=attempt, role=role)
        name = manifest["metadata"]["name"]
        for _ in range(3):
            try:
                existing = await self.kube.get(PODS, name, entry.namespace)
            except NotFound:
                try:
                    created = await self.kube.create(PODS, manifest, entry.namespace)
                except AlreadyExists:
                    continue  # created concurrently; adopt it on the next pass
                self.metrics.pods_created.labels(role).inc()
                return created
            if _owned_by(existing, entry.uid):
                return existing  # adopt
            log.warning("deleting pod %s/%s left over from an older rollout of the same name", entry.namespace, name)
            await self.kube.delete(PODS, name, entry.namespace, uid=existing["metadata"]["uid"], grace_period_seconds=0)
            await asyncio.sleep(0.5)
        raise RuntimeError(f"could not create or adopt pod {entry.namespace}/{name}")

    async def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self.kube.delete(PODS, name, namespace)
        except NotFound:
            pass

    async def _cleanup_pods(self, entry: Tracked, *, terminal: bool) -> None:
        if entry.cleaned_up:
            return
        keep = terminal and entry.phase == Phase.FAILED and self.settings.keep_failed_pods
        if not keep:
            selector = f"{api.LABEL_ROLLOUT}={entry.name}"
            async for pod in self.kube.iter_items(PODS, entry.namespace, label_selector=selector):
                if _owned_by(pod, entry.uid) and not pod["metadata"].get("deletionTimestamp"):
                    await self._delete_pod(entry.namespace, pod["metadata"]["name"])
        entry.cleaned_up = True

    # -- pods --------------------------------------------------------------------

    async def on_pod(self, pod: dict[str, Any], *, deleted: bool = False) -> None:
        """React to a rollout or eval pod's change (from a watch event)."""
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == api.KIND and o.get("controller")),
            None,
        )
        if owner is None:
            return
        entry = self.tracked.get(owner["uid"])
        if entry is None:
            return
        role = (pod["metadata"].get("labels") or {}).get(api.LABEL_COMPONENT, "rollout")
        async with entry.lock:
            if role == "eval":
                await self._on_eval_pod(entry, pod, deleted=deleted)
            else:
                await self._on_rollout_pod(entry, pod, deleted=deleted)

    async def _on_rollout_pod(self, entry: Tracked, pod: dict[str, Any], *, deleted: bool = False) -> None:
        sandbox = entry.status.get("sandbox") or {}
        if pod["metadata"]["name"] != sandbox.get("podName"):
            return  # an older attempt's pod
        state = read_pod(pod)
        phase = entry.phase
        gone = deleted or bool(pod["metadata"].get("deletionTimestamp")) or state.failed
        if phase == Phase.STARTING:
            if state.ready and not gone:
                if entry.pod_created_at is not None:
                    self.metrics.sandbox_startup.observe(time.monotonic() - entry.pod_created_at)
                await self.transition(
                    entry,
                    Event.SANDBOX_READY,
                    reason="SandboxReady",
                    message=f"pod {pod['metadata']['name']} is ready on {state.node_name}",
                    extra={"sandbox": _handle(pod, state)},
                )
            elif gone:
                reason = state.reason if state.failed else "PodDeleted"
                self.metrics.startup_failures.labels(reason).inc()
                message = state.message or f"pod {pod['metadata']['name']} was deleted before it became ready"
                await self.transition(entry, Event.STARTUP_FAILED, reason=reason, message=message, warning=True)
        elif phase == Phase.RUNNING and gone:
            detail = state.message or "the pod was deleted"
            await self.transition(
                entry, Event.POD_LOST, reason="PodLost",
                message=f"sandbox pod {pod['metadata']['name']} lost while running ({detail}); no snapshot to resume from",
                warning=True,
            )
        elif phase == Phase.RESUMING:
            if gone:
                await self._ensure_resume_pod(entry)
            elif state.ready and sandbox.get("podIP") != state.pod_ip:
                await self._patch_status(entry, {"sandbox": {**sandbox, **_handle(pod, state)}})
        elif phase == Phase.ABORTED and gone and not sandbox.get("reclaimedAt"):
            await self._patch_status(
                entry,
                {
                    "sandbox": {**sandbox, "reclaimedAt": phases.now()},
                    "message": f"pod {pod['metadata']['name']} is gone; a resume replays the recorded actions into a fresh pod",
                },
            )

    async def _on_eval_pod(self, entry: Tracked, pod: dict[str, Any], *, deleted: bool) -> None:
        evaluation = entry.status.get("evaluation") or {}
        if entry.phase != Phase.EVALUATING or pod["metadata"]["name"] != evaluation.get("podName"):
            return
        state = read_pod(pod)
        if not (deleted or state.failed):
            return
        attempt = int(evaluation.get("attempt") or 1)
        if attempt >= MAX_EVAL_ATTEMPTS:
            await self.transition(
                entry, Event.FAILED, reason="EvalPodFailed",
                message=f"eval pod {pod['metadata']['name']} failed ({state.reason}: {state.message}) after {attempt} attempts",
                warning=True,
            )
            return
        await self._patch_status(entry, {"evaluation": {"attempt": attempt + 1}})
        await self._ensure_eval_pod(entry)

    async def check_deadlines(self) -> None:
        """Startup timeouts and keep-alive expiry, for every rollout, in one pass."""
        now = time.monotonic()
        for entry in list(self.tracked.values()):
            if entry.phase == Phase.STARTING and entry.startup_deadline is not None and now >= entry.startup_deadline:
                async with entry.lock:
                    await self._startup_timeout(entry)
            elif entry.phase == Phase.ABORTED:
                async with entry.lock:
                    await self._reconcile_aborted(entry)
            if entry.progress_dirty and now - entry.progress_written_at >= self.settings.status_coalesce_seconds:
                await self.flush_progress(entry)

    async def _startup_timeout(self, entry: Tracked) -> None:
        pod_name = (entry.status.get("sandbox") or {}).get("podName") or podspec.rollout_pod_name(entry.name, 1)
        detail = "the pod does not exist"
        try:
            state = read_pod(await self.kube.get(PODS, pod_name, entry.namespace))
            detail = f"{state.reason}: {state.message}" if state.message else state.reason
        except NotFound:
            pass
        self.metrics.startup_failures.labels("Timeout").inc()
        await self.transition(
            entry,
            Event.STARTUP_FAILED,
            reason="StartupTimeout",
            message=f"sandbox pod {pod_name} not ready within startupTimeoutSeconds ({detail})",
            warning=True,
        )

    # -- runner reports (ingest API) ----------------------------------------------

    async def on_progress(self, entry: Tracked, progress: ProgressReport) -> None:
        for seconds in progress.generation_seconds:
            self.metrics.generation_seconds.observe(seconds)
        for seconds in progress.tool_seconds:
            self.metrics.tool_seconds.observe(seconds)
        delta = progress.generated_tokens - entry.generated_reported
        if delta > 0:
            self.metrics.generated_tokens.inc(delta)
            entry.generated_reported = progress.generated_tokens
        entry.progress = progress
        entry.progress_dirty = True
        if time.monotonic() - entry.progress_written_at >= self.settings.status_coalesce_seconds:
            await self.flush_progress(entry)

    async def flush_progress(self, entry: Tracked) -> None:
        progress = entry.progress
        if progress is None or not entry.progress_dirty or entry.phase.is_terminal:
            return
        entry.progress_dirty = False
        entry.progress_written_at = time.monotonic()
        try:
            await self._patch_status(
                entry,
                {
                    "progress": {
                        "turns": progress.turns,
                        "tokens": progress.context_tokens,
                        "generatedTokens": progress.generated_tokens,
                        "updatedAt": phases.now(),
                    }
                },
            )
        except KubeError as exc:
            entry.progress_dirty = True
            log.warning("progress patch for %s/%s failed: %s", entry.namespace, entry.name, exc)

    async def on_runner_event(self, entry: Tracked, event: RunnerEvent) -> Ack:
        async with entry.lock:
            applied = await self._apply_runner_event(entry, event)
        await self.notify(entry)
        return Ack(ok=True, duplicate=not applied, phase=entry.phase.value)

    async def _apply_runner_event(self, entry: Tracked, event: RunnerEvent) -> bool:
        if event.kind == EventKind.STARTED:
            # A runner notice: what it found out about the inference server (a smaller
            # context than the spec asked, routing rows the server cannot return).
            notice = event.message.strip()
            if notice:
                await post_event(self.kube, entry.meta, reason=event.reason or "RunnerNotice", message=notice, warning=True)
            if entry.phase == Phase.RESUMING:
                self.metrics.resumes.inc()
                message = "the runner resumed from the snapshot" + (f"; {notice}" if notice else "")
                return await self.transition(entry, Event.RESUMED, reason="Resumed", message=message)
            if notice and entry.phase == Phase.RUNNING:
                await self._patch_status(entry, {"message": notice})
            return False
        if event.kind == EventKind.ABORTED:
            if event.snapshot is None:
                return await self.transition(
                    entry, Event.FAILED, reason="NoSnapshot", message="the runner aborted without a snapshot", warning=True
                )
            partial = {
                "snapshot": _object_ref(event.snapshot),
                "turns": event.turns,
                "tokens": event.context_tokens,
                "abortedAt": phases.now(),
                "reason": event.reason or "Suspended",
            }
            if event.weight_version:
                partial["weightVersion"] = event.weight_version
            applied = await self.transition(
                entry, Event.ABORTED, reason=event.reason or "Suspended",
                message=event.message or f"aborted after {event.turns} turns; snapshot kept",
                extra={"partial": partial, "replay": False},
            )
            if applied:
                self.metrics.aborts.labels(abort_reason_label(event.reason or "Suspended")).inc()
                if not entry.spec.get("suspend"):
                    # An abort from the inference side (abort_all, pause_generation): record
                    # it as a suspension, so resuming is the same for every abort.
                    body = await self.kube.patch(SWEROLLOUTS, entry.name, {"spec": {"suspend": True}}, entry.namespace)
                    self.observe(body)
            return applied
        if event.kind == EventKind.FINISHED:
            return await self._finished(entry, event)
        if event.kind == EventKind.EVALUATED:
            reward = event.reward
            if reward is None:
                return False
            patch = {
                "reward": {
                    "value": reward.reward,
                    "resolved": reward.resolved,
                    "graded": reward.graded,
                    "failToPassPassed": reward.fail_to_pass_passed,
                    "failToPassTotal": reward.fail_to_pass_total,
                    "passToPassPassed": reward.pass_to_pass_passed,
                    "passToPassTotal": reward.pass_to_pass_total,
                    "message": reward.message[:1024],
                    **({"report": _object_ref(event.report)} if event.report else {}),
                }
            }
            started = _parse_time((entry.status.get("evaluation") or {}).get("startedAt"))
            applied = await self.transition(
                entry, Event.EVALUATED, reason="Evaluated",
                message=f"reward {reward.reward} ({'resolved' if reward.resolved else 'not resolved'})", extra=patch,
            )
            if applied and started is not None:
                self.metrics.eval_duration.observe((_utcnow() - started).total_seconds())
            if applied:
                await self._cleanup_pods(entry, terminal=True)
            return applied
        # FAILED
        applied = await self.transition(
            entry, Event.FAILED, reason=event.reason or "RunnerFailed", message=event.message or "the runner failed",
            warning=True,
        )
        if applied:
            await self._cleanup_pods(entry, terminal=True)
        return applied

    async def _finished(self, entry: Tracked, event: RunnerEvent) -> bool:
        exit_status = event.exit_status or "exit_error"
        result = {
            "exitStatus": exit_status,
            "turns": event.turns,
            "promptTokens": event.prompt_tokens,
            "responseTokens": event.response_tokens,
            "truncated": event.truncated,
            "hasPatch": event.patch is not None and event.patch.bytes > 0,
            **({"trajectory": _object_ref(event.trajectory)} if event.trajectory else {}),
            **({"patch": _object_ref(event.patch)} if event.patch else {}),
        }
        reward_spec = entry.spec.get("reward") or {}
        mode = api.Mode(entry.spec.get("mode", "train"))
        decision = gate_exit_status(exit_status, mode)
        if not reward_spec.get("enabled", True):
            applied = await self.transition(
                entry, Event.FINISHED_UNGRADED, reason="Finished", message=f"{exit_status}; reward disabled",
                extra={"result": result},
            )
        elif not decision.evaluate or not result["hasPatch"]:
            why = decision.reason if not decision.evaluate else "no patch to evaluate"
            applied = await self.transition(
                entry, Event.FINISHED_UNGRADED, reason="NotGraded", message=f"{exit_status}: {why}",
                extra={"result": result, "reward": {"value": 0.0, "resolved": False, "graded": False, "message": why[:1024]}},
            )
        else:
            applied = await self.transition(
                entry, Event.FINISHED, reason="Finished", message=f"{exit_status}; evaluating the patch in a fresh pod",
                extra={"result": result, "evaluation": {"attempt": 1}},
            )
            if applied:
                # The policy's sandbox is done: the eval pod never sees it.
                sandbox = entry.status.get("sandbox") or {}
                if sandbox.get("podName"):
                    await self._delete_pod(entry.namespace, sandbox["podName"])
                await self._ensure_eval_pod(entry)
                return True
        if applied:
            await self._cleanup_pods(entry, terminal=True)
        return applied

    # -- deletion ----------------------------------------------------------------

    async def cleanup(self, body: dict[str, Any]) -> None:
        """Delete everything the rollout made. Owner references would do it in a full
        cluster, but the finalizer makes it immediate and also works where no garbage
        collector runs (the embedded dev mode)."""
        meta = body["metadata"]
        selector = f"{api.LABEL_ROLLOUT}={meta['name']}"
        async for pod in self.kube.iter_items(PODS, meta["namespace"], label_selector=selector):
            if _owned_by(pod, meta["uid"]):
                await self._delete_pod(meta["namespace"], pod["metadata"]["name"])
        try:
            secret = await self.kube.get(SECRETS, podspec.secret_name(meta["name"]), meta["namespace"])
            if _owned_by(secret, meta["uid"]):
                await self.kube.delete(SECRETS, secret["metadata"]["name"], meta["namespace"], uid=secret["metadata"]["uid"])
        except NotFound:
            pass
        for hook in self.on_deleted_rollout:
            await hook(meta["namespace"], meta["name"], meta["uid"])
        entry = self.tracked.get(meta["uid"])
        self.forget(meta["uid"])
        if entry is not None:
            await self.notify(entry)


def _handle(pod: dict[str, Any], state: Any) -> dict[str, Any]:
    return {
        "podName": pod["metadata"]["name"],
        "podUID": pod["metadata"]["uid"],
        "podIP": state.pod_ip,
        "nodeName": state.node_name,
        "startedAt": phases.now(),
    }


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])


