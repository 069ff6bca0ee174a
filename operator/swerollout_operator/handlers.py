"""kopf wiring: which events call which Reconciler method. No logic lives here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from swerollout.api import v1alpha1 as api

from .runtime import OperatorRuntime

log = logging.getLogger(__name__)
ROLLOUTS = (api.GROUP, api.VERSION, api.PLURAL)


def _runtime(memo: Any) -> OperatorRuntime:
    runtime: OperatorRuntime = memo.runtime
    return runtime


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    # kopf's handler bookkeeping goes to annotations: our status schema has no
    # place for it, and the API server would silently prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="swerollout.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="swerollout.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = api.FINALIZER
    # No cluster-wide discovery: the namespaced Role is all the operator needs.
    settings.scanning.disabled = True
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    await _runtime(memo).start()
    memo.sweeper = asyncio.create_task(_sweep(memo))


@kopf.on.cleanup()
async def shutdown(memo: Any, **_: Any) -> None:
    task = getattr(memo, "sweeper", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await _runtime(memo).stop()


@kopf.on.login()
def login(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
    if _runtime(memo).in_cluster:
        return kopf.login_with_service_account(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


async def _sweep(memo: Any) -> None:
    """One task for all rollouts (not a kopf timer per object, which costs a task each):
    deadlines, coalesced progress writes, and retries of reconciles that failed."""
    runtime = _runtime(memo)
    while True:
        await asyncio.sleep(1)
        try:
            await runtime.reconciler.check_deadlines()
        except Exception:  # noqa: BLE001 - the sweeper must survive any single failure
            runtime.metrics.reconcile_errors.labels("sweep").inc()
            log.exception("deadline sweep failed")
        for uid in list(runtime.retry):
            entry = runtime.reconciler.tracked.get(uid)
            runtime.retry.discard(uid)
            if entry is not None:
                await _reconcile(runtime, entry.body)


async def _reconcile(runtime: OperatorRuntime, body: dict[str, Any]) -> None:
    try:
        await runtime.reconciler.reconcile(body)
    except Exception:
        runtime.metrics.reconcile_errors.labels("rollout").inc()
        runtime.retry.add(body["metadata"]["uid"])
        log.exception("reconciling %s/%s failed; retrying", body["metadata"]["namespace"], body["metadata"]["name"])


@kopf.on.event(*ROLLOUTS)
async def rollout_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    """Every change (and the initial listing after a restart) reconciles the rollout."""
    if event["type"] == "DELETED":
        return
    await _reconcile(_runtime(memo), dict(event["object"]))


@kopf.on.delete(*ROLLOUTS)
async def rollout_deleted(body: kopf.Body, memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    try:
        await runtime.reconciler.cleanup(dict(body))
    except Exception:
        runtime.metrics.reconcile_errors.labels("delete").inc()
        raise


@kopf.on.event("", "v1", "pods", labels={api.LABEL_ROLLOUT: kopf.PRESENT})
async def pod_changed(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    try:
        await runtime.reconciler.on_pod(dict(event["object"]), deleted=event["type"] == "DELETED")
    except Exception:
        runtime.metrics.reconcile_errors.labels("pod").inc()
        log.exception("handling pod event failed")
