"""Warm starts: a rollout suspended before its first run is prepared and parks; an eval pod
may start while its rollout runs.

Prepared (the phase machine's `Starting -> Prepared -> Running`): the pod is ready, the
runner is told `prepare` (phases.assignment_for), loads the tokenizer, builds the first prompt
and reports `prepared`; the go (the rollout's or its batch's suspend back to false) is
answered to the runner in memory as `run`, and the pass here records Running. A Prepared
rollout holds its pod for `spec.sandbox.preparedTimeoutSeconds`; then the pod is released
(nothing of the run is lost: none has happened) and a go starts a fresh pod, cold.

A prewarmed eval pod (`spec.reward.prewarm`) is the eval pod of attempt 1, made while the
rollout is prepared or runs; its runner waits (phases.assignment_for) until Evaluating, and the
pass that makes the eval pod (reconciler._ensure_eval_pod) adopts it by its deterministic
name. A prepared rollout makes it too: a prepared batch's runs start together at the go and
a short run may finish within seconds, before an eval pod made at the go has started its
sandbox (measured: bench prepared, docs/architecture.md); released with the prepared pod.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from swerollout.api import v1alpha1 as api

from .deadlines import prepared_expired, utcnow
from .phases import Trigger

if TYPE_CHECKING:
    from .cache import PodCache, Tracked
    from .objects import Objects
    from .podstatus import PodState


class Transitions(Protocol):
    """The reconciler's phase-machine step and its Events, which warm starts call back into."""

    def post_event(self, entry: Tracked, *, reason: str, message: str, warning: bool = False) -> None: ...

    async def transition(
        self,
        entry: Tracked,
        event: Trigger,
        *,
        reason: str,
        message: str,
        extra: api.SWERolloutStatus | None = None,
        warning: bool = False,
    ) -> bool: ...


class Reconciler(Transitions, Protocol):
    """What warm starts need of the reconciler (reconciler.py), which calls in: this module
    sits below it."""

    objects: Objects
    pods: PodCache

    def suspended(self, entry: Tracked) -> bool: ...

    async def sandbox_pod(self, entry: Tracked) -> tuple[dict[str, Any] | None, PodState | None, bool]: ...


def _now() -> Any:
    return utcnow().replace(microsecond=0)


async def park_prepared(r: Reconciler, entry: Tracked, pod: dict[str, Any], handle: api.SandboxHandle) -> None:
    """The pod of a rollout suspended before its first run is ready: it becomes Prepared."""
    state = api.PreparedState(since=_now(), prepared_at=None, prompt_tokens=None, released_at=None)
    await r.transition(
        entry,
        Trigger.PREPARE,
        reason="Preparing",
        message=f"pod {pod['metadata']['name']} is ready and the rollout is suspended: preparing its first turn",
        extra=api.SWERolloutStatus(sandbox=handle, prepared=state),
    )


async def reconcile_prepared(r: Reconciler, entry: Tracked) -> None:
    status = entry.rollout_status
    sandbox = status.sandbox or api.SandboxHandle()
    released = bool(sandbox.reclaimed_at)
    if not r.suspended(entry):
        if released:
            await _restart(r, entry)
            return
        _, _, gone = await r.sandbox_pod(entry)
        if gone:
            await _release(r, entry, f"pod {sandbox.pod_name} is gone; the rollout starts in a fresh pod")
            return
        await r.transition(
            entry, Trigger.START_REQUESTED, reason="Started", message="spec.suspend is false: running from prepared"
        )
        return
    if released:
        return
    if prepared_expired(entry):
        keep = entry.rollout_spec.sandbox.prepared_timeout_seconds
        if sandbox.pod_name:
            await r.objects.delete_pod(entry.namespace, sandbox.pod_name)
        await release_prewarmed_eval(r, entry)
        await _release(
            r,
            entry,
            f"pod {sandbox.pod_name} released after preparedTimeoutSeconds ({keep}s); a resume starts a fresh pod",
        )
        r.post_event(entry, reason="PreparedReleased", message=f"pod {sandbox.pod_name} deleted after {keep}s prepared")
        return
    _, _, gone = await r.sandbox_pod(entry)
    if gone:
        await release_prewarmed_eval(r, entry)
        await _release(r, entry, f"pod {sandbox.pod_name} is gone; a resume starts a fresh pod")
        return
    await ensure_prewarmed_eval(r, entry)


async def _release(r: Reconciler, entry: Tracked, message: str) -> None:
    at = _now()
    await r.transition(
        entry,
        Trigger.PREPARED_RELEASED,
        reason="Released",
        message=message,
        extra=api.SWERolloutStatus(
            sandbox=api.SandboxHandle(reclaimed_at=at),
            prepared=api.PreparedState(released_at=at, since=_since(entry)),
        ),
    )


def _since(entry: Tracked) -> Any:
    prepared = entry.rollout_status.prepared
    return prepared.since if prepared is not None else _now()


async def _restart(r: Reconciler, entry: Tracked) -> None:
    """A go for a released Prepared rollout: a fresh pod (the next attempt) starts it, cold."""
    attempt = max(1, entry.rollout_status.attempts) + 1
    if attempt > entry.rollout_spec.sandbox.max_attempts:
        await r.transition(
            entry,
            Trigger.FAILED,
            reason="TooManyAttempts",
            message=f"{attempt - 1} pods started; giving up",
            warning=True,
        )
        return
    pod = await r.objects.ensure_pod(entry, attempt, role="rollout")
    handle = api.SandboxHandle.model_validate(
        {
            "pod_name": pod["metadata"]["name"],
            "pod_uid": pod["metadata"]["uid"],
            "pod_ip": None,
            "node_name": None,
            "started_at": None,
            "reclaimed_at": None,
        }
    )
    await r.transition(
        entry,
        Trigger.RESTARTED,
        reason="Restarted",
        message=f"its prepared pod was released; starting in {pod['metadata']['name']}",
        extra=api.SWERolloutStatus(
            attempts=attempt,
            sandbox=handle,
            prepared=api.PreparedState(since=_since(entry), restarted_at=_now()),
        ),
    )


def _prewarm(entry: Tracked) -> bool:
    reward = entry.rollout_spec.reward
    return reward.enabled and reward.prewarm


async def ensure_prewarmed_eval(r: Reconciler, entry: Tracked) -> None:
    """While the rollout is prepared or runs, its eval pod (attempt 1) exists and waits for the patch."""
    if _prewarm(entry) and entry.rollout_status.evaluation is None:
        await r.objects.ensure_pod(entry, 1, role="eval")


async def release_prewarmed_eval(r: Reconciler, entry: Tracked) -> None:
    """An Aborted rollout's pod is reclaimed, or a Prepared one's released: its waiting eval pod
    goes too (made again on resume, or when the fresh pod runs)."""
    for pod in r.pods.owned_by(entry.uid):
        labels = pod["metadata"].get("labels") or {}
        if labels.get(api.LABEL_COMPONENT) == "eval" and not pod["metadata"].get("deletionTimestamp"):
            await r.objects.delete_pod(entry.namespace, pod["metadata"]["name"])
