"""kopf wiring: watch events feed the caches and the work queue. No logic lives here.

kopf owns the watches (and the finalizer); the work is done by our keyed queue's
workers (runtime.py), which read the caches that these handlers keep fresh.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from swerollout.api import v1alpha1 as api

from .runtime import OperatorRuntime

log = logging.getLogger(__name__)
ROLLOUTS = (api.GROUP, api.VERSION, api.PLURAL)
PODS = ("", "v1", "pods")
BATCHES = (api.GROUP, api.VERSION, api.BATCH_PLURAL)


class _NoDiffBase(kopf.DiffBaseStorage):
    """kopf keeps a copy of each object's spec (an annotation, written on every spec
    change) to tell creations and updates apart for on.create/on.update handlers. We
    have none (deletion is not a diff, and our reconciles are level-triggered), so the
    object is always "as last handled" and kopf writes nothing: two API writes per
    abort/resume cycle and one per creation saved."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        # kopf builds (deep-copies) an essence of every watch event to diff it; with no
        # handler that reads the diff, an empty one is the same answer at no cost.
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _runtime(memo: Any) -> OperatorRuntime:
    runtime: OperatorRuntime = memo.runtime
    return runtime


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """kopf's settings, at each start of kopf's watches (once, or after each change of the
    owned shards: __main__). The runtime itself is started before and stopped after kopf."""
    # kopf's handler bookkeeping goes to annotations: our status schema has no
    # place for it, and the API server would silently prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="swerollout.io")
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.persistence.finalizer = api.FINALIZER
    # No cluster-wide discovery: the namespaced Role is all the operator needs.
    settings.scanning.disabled = True
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # An API server restart (an upgrade, a crash) can take minutes on a busy control
    # plane; kopf's default retries (about a minute in all) would end the watches and
    # the operator with them. Ride it out: about four minutes before giving up.
    settings.networking.error_backoffs = (1, 1, 2, 3, 5, 8, 13, 21, 30, 30, 30, 30, 30, 30)
    # Our handlers only note what changed; coalescing is the work queue's job.
    settings.batching.batch_window = 0.01
    runtime = _runtime(memo)
    selector = runtime.watch_selector()
    if selector is not None:
        # A sharded replica watches its own shards' rollouts and pods only (server-side).
        settings.watching.label_selectors[ROLLOUTS] = selector
        settings.watching.label_selectors[PODS] = selector


@kopf.on.login()
def login(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
    runtime = _runtime(memo)
    if runtime.in_cluster:
        # Our own loader's view of the ServiceAccount (settings.service_account_dir), so
        # kopf's watches and our client are one identity; a rotated token is read again
        # when the API server answers 401 and kopf logs in anew.
        config = runtime.kube_config()
        return kopf.ConnectionInfo(
            server=config.server, ca_data=config.ca_pem, token=config.bearer_token(), default_namespace=config.namespace
        )
    return kopf.login_with_kubeconfig(**kwargs)


async def sweep(runtime: OperatorRuntime) -> None:
    """One task for all rollouts (not a kopf timer per object, which costs a task each):
    deadlines and coalesced progress writes."""
    while True:
        await asyncio.sleep(1)
        try:
            await runtime.reconciler.sweep()
        except Exception:  # noqa: BLE001 - the sweeper must survive any single failure
            runtime.metrics.reconcile_errors.labels("sweep").inc()
            log.exception("deadline sweep failed")


@kopf.on.event(*ROLLOUTS)
async def rollout_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    """Every change (and the initial listing after a restart) queues the rollout,
    except the echo of our own status write."""
    runtime = _runtime(memo)
    body: dict[str, Any] = dict(event["object"])
    uid = str(body["metadata"]["uid"])
    if event["type"] == "DELETED":
        runtime.forget(uid)
        return
    if not runtime.owns(body["metadata"]["namespace"], body["metadata"]["name"]):
        # Another replica's shard: seen during a watch restart, or labelled for a shard its
        # name does not hash to (relabelled here, so that its owner's watch sees it).
        runtime.forget(uid)
        await runtime.relabel(body)
        return
    if await runtime.reconciler.observe(body):
        runtime.queue.add(uid)


@kopf.on.delete(*ROLLOUTS)
async def rollout_deleted(body: kopf.Body, memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    try:
        await runtime.reconciler.cleanup(dict(body))
    except Exception:
        runtime.metrics.reconcile_errors.labels("delete").inc()
        raise
    runtime.forget(str(body.meta["uid"]))


@kopf.on.event(*BATCHES)
async def batch_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    """A batch's suspend or weight version changed: its members' runners are told at once
    (in memory), and its unfinished members get a pass (those whose runner was told,
    after its report had time to come: see Reconciler.observe_batch)."""
    runtime = _runtime(memo)
    body: dict[str, Any] = dict(event["object"])
    passes = await runtime.reconciler.observe_batch(body, deleted=event["type"] == "DELETED")
    for uid in passes.now:
        runtime.queue.add(uid)
    for uid in passes.later:
        runtime.queue.add_after(uid, runtime.settings.runner_report_grace_seconds)


@kopf.on.event(*PODS, labels={api.LABEL_ROLLOUT: kopf.PRESENT})
async def pod_changed(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    deleted = event["type"] == "DELETED"
    pod: dict[str, Any] = dict(event["object"])
    owners: list[dict[str, Any]] = pod["metadata"].get("ownerReferences") or []
    owner = next((o for o in owners if o.get("kind") == api.KIND), None)
    if owner is not None and not runtime.owns(str(pod["metadata"]["namespace"]), str(owner.get("name"))):
        return  # another replica's (seen while its watch restarts)
    uid = runtime.reconciler.observe_pod(pod, deleted=deleted)
    if uid is not None:
        runtime.queue.add(uid)
    if deleted:
        runtime.reconciler.wake_quota_waiters(str(event["object"]["metadata"]["namespace"]))
