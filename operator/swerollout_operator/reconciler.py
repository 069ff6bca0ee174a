"""The reconcile pass for one rollout, and the phase transitions it and the runners make.

Level-triggered and idempotent: a pass looks at the rollout and its pods as the
caches hold them and makes the world match; running it twice does nothing twice.
It reads nothing from the API server in steady state (see cache.py), and the
watch echo of its own status write does not start another pass. A pass that
changed the phase asks for one more (the new phase may have work), so nothing
waits for an event that will not come.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import Phase, is_suspended
from swerollout.exit_status import metric_label
from swerollout.issue_images import spec_problem
from swerollout.kube import SWEROLLOUTBATCHES, SWEROLLOUTS, AsyncKubeClient, KubeError, NotFound, urgent
from swerollout.wire.ingest import Ack, Assignment, AssignmentKind, ProgressReport, RunnerEvent

from . import phases, podspec, retries, warm
from .cache import BatchCache, BatchState, PodCache, RolloutCache, Tracked, controller_uid
from .deadlines import DeadlineQueue, keepalive_expired, queue_overdue, startup_overdue, utcnow
from .events import post_event
from .memory import Trimmer
from .metrics import OperatorMetrics, abort_reason_label
from .objects import Objects, QuotaRefused, Rejected
from .phases import IllegalTransition, Trigger, assignment_for
from .podstatus import PodState, read_pod
from .progress import ProgressCoalescer
from .settings import OperatorSettings
from .tokens import TokenKey

log = logging.getLogger(__name__)
# Events are best effort and written in the background, at most this many at once.
EVENT_WRITERS = 8
QUOTA_RETRY_MAX_SECONDS = 30.0
"""A pod refused for quota is created again after 2, 4, ... seconds, at most this far apart."""
QUOTA_WAKE_PER_POD = 2
QUOTA_WAKE_DELAY_SECONDS = 2.0
"""After one of our pods is deleted, this many quota waiters of its namespace retry after this
delay (the quota controller counts the pod out first; a few spare tries cover pods of others)."""
PARSED_IDLE_SECONDS = 10.0
"""A rollout whose parsed spec and status nobody read for this long holds neither (memory
at thousands of rollouts at rest). Short, so that the models of a burst's first rollouts
are gone, and their memory reused, before its last ones are parsed: with 60 s, a burst of
1,000 held them all at once. Parsing again costs about 0.2 ms (the spec), against the
milliseconds of a pass's API requests; the release looks at every rollout every 2.5 s."""
PROGRESS_WRITERS = 16
"""Coalesced progress writes the sweep has in flight at once (the rest wait for a later sweep)."""
EVENTFUL = frozenset({Trigger.SANDBOX_READY, Trigger.REPLAY_STARTED})
"""Transitions that post a Normal Event, besides the end of a rollout (and every warning):
where it runs, and a replay. The routine ones (pod created, aborted, resuming, resumed,
evaluating) happen to whole batches at once, with every weight update; the status
(phase, conditions, message) says them, and an Event each would be 500 API writes per
batch abort and resume."""


@dataclass
class BatchPasses:
    """The members of a batch that changed, by when their pass is due."""

    now: list[str] = field(default_factory=list)
    later: list[str] = field(default_factory=list)
    """Runners told in memory: their pass after settings.runner_report_grace_seconds (see observe_batch)."""


class Reconciler:
    def __init__(
        self, kube: AsyncKubeClient, settings: OperatorSettings, token_key: TokenKey, metrics: OperatorMetrics
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics
        self.rollouts = RolloutCache()
        self.pods = PodCache()
        self.batches = BatchCache()
        self.objects = Objects(kube, self.pods, settings, token_key, metrics)
        self.progress = ProgressCoalescer(self.write_status, metrics, settings.status_coalesce_seconds)
        self.requeue: Callable[[str], None] = lambda uid: None
        """Ask for a pass over a rollout (set to the work queue's `add` by the runtime)."""
        self.requeue_after: Callable[[str, float], None] = lambda uid, delay: None
        """Ask for a pass after a delay in seconds (the work queue's `add_after`)."""
        self.on_deleted_rollout: list[Callable[[str, str, str], Awaitable[None]]] = []
        self._event_slots = asyncio.Semaphore(EVENT_WRITERS)
        self._background: set[asyncio.Task[None]] = set()
        self._releasing: set[tuple[str, str]] = set()  # (namespace, name) of _release_pod's deletes in flight
        self.deadlines = DeadlineQueue()
        self._progress_writing = 0
        self._next_release = 0.0
        self.trimmer = Trimmer()

    @property
    def tracked(self) -> dict[str, Tracked]:
        return self.rollouts.entries

    # -- what the watches say ----------------------------------------------------

    async def observe(self, body: dict[str, Any]) -> bool:
        """A rollout watch event; True when it is news that needs a pass."""
        before = self.rollouts.entries.get(str(body["metadata"]["uid"]))
        generation = before.generation if before is not None else None
        entry, news = self.rollouts.observe(body)
        if before is None and not body.get("status") and entry.created_at is not None:
            self.metrics.watch_lag.observe(max(0.0, (utcnow() - entry.created_at).total_seconds()))
        if before is not None and entry.generation != generation:
            # What a runner is told is a function of spec and status (phases.assignment_for), so
            # its long poll is answered now (a suspend reaches every runner of a batch as
            # its mark arrives), not after a pass that may queue behind a whole batch.
            await self.notify(entry)
            if not entry.phase.is_terminal:
                self._time_abort(entry, self._runner_told(entry))
        return news

    async def observe_batch(self, body: dict[str, Any], *, deleted: bool) -> BatchPasses:
        """A SWERolloutBatch watch event; returns the unfinished members that need a pass
        (an Aborted member of a resumed batch whose pod is gone replays there).

        What a runner is told depends on its batch (phases.assignment_for), so every member's
        long poll is woken here, in memory and at once: one write by the trainer reaches
        every runner of the batch without a single write by the operator.

        A member whose runner was just told to abort, resume or (Prepared) run gets its pass
        later (--runner-report-grace-seconds): its runner's report makes the one transition
        that is needed (Running -> Aborted, Aborted -> Running, Prepared -> Running) and asks
        for the pass itself.
        A pass first would write Resuming for every member of a resumed batch, 500 status
        writes in the way of the 500 that matter; it still comes when a runner is silent."""
        key = self.batches.observe(body, deleted=deleted)
        passes = BatchPasses()
        if key is None:
            return passes
        members = self.rollouts.members(key)
        for entry in members:
            await self.notify(entry)
        for entry in members:
            if entry.phase.is_terminal:
                continue
            told = self._runner_told(entry)
            self._time_abort(entry, told)
            if told in (AssignmentKind.ABORT, AssignmentKind.RESUME) or (
                # A prepared member's go: its runner's `started` records Running, so the 20
                # status writes of a resumed batch stay out of the way of its first /generates.
                told == AssignmentKind.RUN and entry.phase == Phase.PREPARED
            ):
                entry.told_at = time.monotonic()
                passes.later.append(entry.uid)
            else:
                passes.now.append(entry.uid)
        return passes

    @staticmethod
    def _time_abort(entry: Tracked, told: AssignmentKind) -> None:
        """Start the abort fan-out clock when the runner of an unaborted rollout is first
        told to abort (the Aborted report stops it: phases.decide); anything else resets it."""
        if told != AssignmentKind.ABORT or entry.phase == Phase.ABORTED:
            entry.abort_told_at = 0.0
        elif not entry.abort_told_at:
            entry.abort_told_at = time.monotonic()

    def _report_grace_left(self, entry: Tracked) -> float:
        """Seconds left for the runner of an Aborted rollout, told by its batch to resume,
        to report that it did; 0 when it was not told so (or the grace is over)."""
        if not entry.told_at or self._runner_told(entry) != AssignmentKind.RESUME:
            return 0.0
        return max(0.0, entry.told_at + self.settings.runner_report_grace_seconds - time.monotonic())

    def _runner_told(self, entry: Tracked) -> AssignmentKind:
        """What the rollout's runner of its current attempt is told now."""
        return self.assignment(entry, role="rollout", attempt=max(1, entry.rollout_status.attempts)).kind

    async def sync_batches(self, namespaces: list[str]) -> None:
        """Read every batch before the first pass, so that after a restart no Aborted member
        of a suspended batch is taken for resumed while the batch watch is still listing.
        Without the SWERolloutBatch CRD, rollouts follow their own spec.suspend alone."""
        every: list[str | None] = list(namespaces) if namespaces else [None]  # None: all (cluster-wide)
        for namespace in every:
            try:
                async for body in self.kube.iter_items(SWEROLLOUTBATCHES, namespace):
                    self.batches.observe(body)
            except NotFound:
                log.warning(
                    "the API server does not serve %s.%s: batch abort/resume is off until the CRD is installed "
                    "(kubectl apply --server-side -f crds/) and the operator restarted",
                    api.BATCH_PLURAL,
                    api.GROUP,
                )
                return

    def batch_of(self, entry: Tracked) -> BatchState | None:
        return self.batches.get(entry.batch_key)

    def suspended(self, entry: Tracked) -> bool:
        """The one suspend rule (swerollout.api.v1alpha1.is_suspended): the rollout's own flag or its batch's."""
        batch = self.batch_of(entry)
        return is_suspended(entry.rollout_spec.suspend, batch.spec if batch else None)

    def assignment(self, entry: Tracked, *, role: str, attempt: int) -> Assignment:
        """What the runner asking should be doing now (phases.assignment_for), its batch considered;
        worked out once per body and batch state (a pure function of them)."""
        batch = self.batch_of(entry)
        memo = entry.answers[1] if entry.answers is not None and entry.answers[0] is entry.revision else {}
        known = memo.get((role, attempt))
        if known is not None and known[0] == batch:
            return known[1]
        answer = assignment_for(
            entry,
            role=role,
            attempt=attempt,
            batch=batch.spec if batch else None,
            batch_generation=batch.generation if batch else 0,
        )
        memo[(role, attempt)] = (batch, answer)
        entry.answers = (entry.revision, memo)
        return answer

    def observe_pod(self, pod: dict[str, Any], *, deleted: bool) -> str | None:
        """A pod watch event; returns the uid of the rollout to look at, if we track it."""
        self.pods.update(pod, deleted=deleted)
        uid = controller_uid(pod)
        return uid if uid in self.rollouts.entries else None

    def refresh_gauges(self) -> None:
        for phase, n in self.rollouts.phase_counts().items():
            self.metrics.rollouts.labels(phase.value).set(n)

    async def notify(self, entry: Tracked) -> None:
        async with entry.changed:
            entry.changed.notify_all()

    def lookup(self, namespace: str, name: str, uid: str) -> Tracked | None:
        return self.rollouts.lookup(namespace, name, uid)

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
        if self.rollouts.observe(body)[1]:
            self.requeue(uid)
        return self.lookup(namespace, name, uid)

    # -- status ------------------------------------------------------------------

    async def write_status(self, entry: Tracked, status: api.SWERolloutStatus) -> None:
        """Write a partial status (its set fields): a merge patch of only what differs from
        the cached status, and no write at all when nothing does."""
        patch = entry.status_delta(status)
        if not patch:
            self.metrics.status_patches_skipped.inc()
            return
        # A merge patch without resourceVersion: no 409 storms. The operator is the
        # only status writer and serializes its own writes per rollout (entry.lock).
        entry.writes_in_flight += 1
        body: dict[str, Any] | None = None
        try:
            body = await self.kube.patch_status(SWEROLLOUTS, entry.name, {"status": patch}, entry.namespace)
        finally:
            if self.rollouts.observe_own(entry, body):
                self.requeue(entry.uid)
        self.metrics.status_patches.inc()
        await self.notify(entry)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _release_pod(self, namespace: str, name: str) -> None:
        """Delete a pod the rollout is done with, off the rollout's lock: the eval runner's
        report, on the reward's critical path, waited for that lock while a pass waited
        seconds for the DELETE at a batch's peak. A delete that fails is made again by the
        next pass that finds the pod not going, at the latest the terminal pass's."""
        key = (namespace, name)
        if key in self._releasing:
            return
        self._releasing.add(key)

        async def release() -> None:
            try:
                await self.objects.delete_pod(namespace, name)
            except KubeError as exc:
                log.warning("deleting pod %s/%s failed (the next pass deletes it again): %s", namespace, name, exc)
            finally:
                self._releasing.discard(key)

        self._spawn(release())

    def post_event(self, entry: Tracked, *, reason: str, message: str, warning: bool = False) -> None:
        meta = entry.meta

        async def post() -> None:
            async with self._event_slots:
                await post_event(self.kube, meta, reason=reason, message=message, warning=warning)

        self._spawn(post())

    async def transition(
        self,
        entry: Tracked,
        event: Trigger,
        *,
        reason: str,
        message: str,
        extra: api.SWERolloutStatus | None = None,
        warning: bool = False,
    ) -> bool:
        """Apply one phase-machine event (call with entry.lock held). False when it no longer applies."""
        try:
            change = phases.apply(
                entry.rollout_status,
                event,
                reason=reason,
                message=message,
                generation=entry.generation,
                extra=extra,
            )
        except IllegalTransition as exc:
            log.debug("%s/%s: %s", entry.namespace, entry.name, exc)
            return False
        await self.write_status(entry, change.status)
        if change.new != change.old:
            self.metrics.transitions.labels(change.new.value).inc()
            self.refresh_gauges()
            log.info("%s/%s: %s -> %s (%s)", entry.namespace, entry.name, change.old.value, change.new.value, reason)
            if warning or event in EVENTFUL or change.new.is_terminal:
                self.post_event(
                    entry,
                    reason=reason,
                    message=f"{change.old.value} -> {change.new.value}: {message}",
                    warning=warning,
                )
            if change.new.is_terminal:
                self._observe_completion(entry)
        return True

    def _observe_completion(self, entry: Tracked) -> None:
        status = entry.rollout_status
        if status.start_time is not None:
            self.metrics.rollout_duration.observe((utcnow() - status.start_time).total_seconds())
        if status.reward is not None and status.reward.graded:
            self.metrics.rewards.observe(status.reward.value)
            self.metrics.resolved.labels("true" if status.reward.resolved else "false").inc()
        if status.result is not None:
            self.metrics.turns.observe(status.result.turns)
            self.metrics.exit_statuses.labels(metric_label(status.result.exit_status)).inc()

    # -- the pass ----------------------------------------------------------------

    async def reconcile(self, uid: str) -> None:
        """One pass over a rollout, from the caches. Raises what should be retried later."""
        entry = self.rollouts.entries.get(uid)
        if entry is None or entry.deleting:
            return
        self.metrics.reconciles.inc()
        async with entry.lock:
            log.debug(
                "pass over %s/%s at resourceVersion %s",
                entry.namespace,
                entry.name,
                entry.resource_version,
            )
            before = entry.phase
            try:
                await self._pass(entry)
            except KubeError as exc:
                entry.last_error = str(exc)
                raise
            except Rejected as exc:
                await self.transition(entry, Trigger.FAILED, reason=exc.reason, message=str(exc), warning=True)
            except QuotaRefused as exc:
                # An eval or replay pod (a first pod makes the rollout Queued instead): the
                # phase stays, the message says why, and the create is tried again.
                message = phases.cut_message(f"waiting for quota: {exc}")
                await self.write_status(entry, api.SWERolloutStatus(message=message))
                self._retry_for_quota(entry)
            changed = entry.phase != before
        await self.notify(entry)
        if changed:
            self.requeue(uid)

    async def _pass(self, entry: Tracked) -> None:
        phase = entry.phase
        if phase.is_terminal:
            if not (phase == Phase.FAILED and self.settings.keep_failed_pods):
                await self.objects.delete_pods(entry)
            return
        if not await self._spec_is_valid(entry):
            return
        if startup_overdue(entry):
            await self._startup_timeout(entry)
            return
        if queue_overdue(entry):
            await self._queue_timeout(entry)
            return
        await self.objects.ensure_secret(entry)
        if phase in (Phase.PENDING, Phase.QUEUED, Phase.STARTING):
            await self._ensure_started(entry)
        elif phase == Phase.PREPARED:
            await warm.reconcile_prepared(self, entry)
        elif phase == Phase.RUNNING:
            await self._check_running(entry)
            await warm.ensure_prewarmed_eval(self, entry)
        elif phase == Phase.ABORTED:
            await self._reconcile_aborted(entry)
        elif phase == Phase.RESUMING:
            await self._ensure_resume_pod(entry)
            await warm.ensure_prewarmed_eval(self, entry)
        elif phase == Phase.EVALUATING:
            await self._ensure_eval_pod(entry)

    async def _spec_is_valid(self, entry: Tracked) -> bool:
        """The CRD cannot check everything the API model does (e.g. template variables): a
        spec the model refuses fails the rollout as InvalidSpec, before any pod exists."""
        problem: str | None
        try:
            spec = entry.rollout_spec
        except ValidationError as exc:
            problem = one_line(exc)
        else:
            # Issue images a text-only chat template cannot show (checked once, before the pod;
            # loading a tokenizer takes seconds, so off the event loop).
            pending = entry.phase == Phase.PENDING and bool(spec.instance.issue_images)
            problem = await asyncio.to_thread(spec_problem, spec) if pending else None
        if problem is None:
            return True
        await self.transition(
            entry,
            Trigger.FAILED,
            reason="InvalidSpec",
            message=f"{problem}; fix it and create the rollout again",
            warning=True,
        )
        return False

    async def sandbox_pod(self, entry: Tracked) -> tuple[dict[str, Any] | None, PodState | None, bool]:
        """The pod named in status.sandbox, its state, and whether it is gone (deleted, going, failed)."""
        name = _pod_name(entry)
        pod = await self.objects.pod(entry, name) if name else None
        if pod is None or not _owned(pod, entry.uid):
            return None, None, True
        state = read_pod(pod)
        return pod, state, bool(pod["metadata"].get("deletionTimestamp")) or state.failed

    async def _ensure_started(self, entry: Tracked) -> None:
        attempt = max(1, entry.rollout_status.attempts)
        if entry.phase == Phase.PENDING or (entry.phase == Phase.QUEUED and _pod_name(entry) is None):
            try:
                pod = await self.objects.ensure_pod(entry, attempt, role="rollout")
            except QuotaRefused as exc:
                await self._queue(entry, api.QueueReason.QUOTA_EXCEEDED, str(exc))
                self._retry_for_quota(entry)
                return
            entry.pod_created_at = time.monotonic()
            handle = _sandbox(pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"])
            await self.transition(
                entry,
                Trigger.POD_CREATED,
                reason="PodCreated",
                message=f"pod {pod['metadata']['name']} created; waiting for the sandbox",
                extra=api.SWERolloutStatus(attempts=attempt, sandbox=handle),
            )
        current, state, gone = await self.sandbox_pod(entry)
        if current is None:
            # Deleted before it was ready (the cache knew it, the server does not).
            self.metrics.startup_failures.labels("PodDeleted").inc()
            name = _pod_name(entry)
            await self.transition(
                entry,
                Trigger.STARTUP_FAILED,
                reason="PodDeleted",
                message=f"pod {name} was deleted before it became ready",
                warning=True,
            )
            return
        assert state is not None
        pod = current
        if gone:
            self.metrics.startup_failures.labels(state.reason).inc()
            message = state.message or f"pod {pod['metadata']['name']} was deleted before it became ready"
            await self.transition(
                entry, Trigger.STARTUP_FAILED, reason=state.reason or "PodDeleted", message=message, warning=True
            )
        elif state.ready:
            if entry.pod_created_at is not None:
                self.metrics.sandbox_startup.observe(time.monotonic() - entry.pod_created_at)
            if self.suspended(entry):
                await warm.park_prepared(self, entry, pod, _handle(pod, state))
                return
            await self.transition(
                entry,
                Trigger.SANDBOX_READY,
                reason="SandboxReady",
                message=f"pod {pod['metadata']['name']} is ready on {state.node_name}",
                extra=api.SWERolloutStatus(sandbox=_handle(pod, state)),
            )
        elif state.waits_for is not None:
            await self._queue(entry, state.waits_for, f"pod {pod['metadata']['name']}: {state.message or state.reason}")
        elif entry.phase == Phase.QUEUED:
            where = f" on {state.node_name}" if state.node_name else ""
            await self.transition(
                entry,
                Trigger.DEQUEUED,
                reason="CapacityFound",
                message=f"pod {pod['metadata']['name']} placed{where}; waiting for the sandbox",
            )

    async def _queue(self, entry: Tracked, why: api.QueueReason, detail: str) -> None:
        """Queued for `why`; written once per reason, not once per retry."""
        queue = entry.rollout_status.queue
        if entry.phase == Phase.QUEUED and queue is not None and queue.reason == why:
            return
        limit = entry.rollout_spec.sandbox.queue_timeout_seconds
        bound = f"up to queueTimeoutSeconds ({limit}s)" if limit else "with no limit (spec.sandbox.queueTimeoutSeconds)"
        await self.transition(
            entry,
            Trigger.QUEUED,
            reason=why.value,
            message=f"waiting for capacity, {bound}; startupTimeoutSeconds does not count the wait: {detail}",
        )

    def _retry_for_quota(self, entry: Tracked) -> None:
        # Nothing announces freed quota (another team's pod may free it), so the create is
        # tried again, sooner when one of our own pods goes (wake_quota_waiters).
        entry.quota_retries += 1
        self.requeue_after(entry.uid, min(QUOTA_RETRY_MAX_SECONDS, 2.0 ** min(entry.quota_retries, 5)))

    def wake_quota_waiters(self, namespace: str) -> None:
        """One of our pods in `namespace` is gone, which may free quota: the rollouts that
        wait longest for it there try their create again (soon, once the quota controller
        has counted the pod out), not all of them at once."""
        waiting = [
            e
            for e in self.rollouts.entries.values()
            if e.namespace == namespace and e.quota_retries and not e.phase.is_terminal
        ]
        waiting.sort(key=lambda e: (e.created_at or datetime.min.replace(tzinfo=UTC), e.name))
        for entry in waiting[:QUOTA_WAKE_PER_POD]:
            entry.quota_retries = 1  # refused once more, the next try comes soon again
            self.requeue_after(entry.uid, QUOTA_WAKE_DELAY_SECONDS)

    async def _check_running(self, entry: Tracked) -> None:
        pod, state, gone = await self.sandbox_pod(entry)
        if gone:
            detail = (state.message if state else "") or "the pod was deleted"
            name = _pod_name(entry)
            trigger = phases.lost_attempt(entry.phase, attempts_left=retries.attempts_left(entry))
            if trigger is Trigger.RETRY:
                await self.retry(entry, reason="PodLost", cause=f"sandbox pod {name} lost while running ({detail})")
                return
            tried = entry.rollout_spec.sandbox.max_attempts
            await self.transition(
                entry,
                Trigger.POD_LOST,
                reason="PodLost",
                message=f"sandbox pod {name} lost while running ({detail}); all {tried} attempts "
                "(spec.sandbox.maxAttempts) are used",
                warning=True,
            )

    async def retry(self, entry: Tracked, *, reason: str, cause: str) -> bool:
        """Replay the rollout from its last checkpoint into a fresh pod (call with entry.lock
        held, attempts left): one status write, then the next pass starts the pod. The old
        pod is deleted, so a runner still alive there stops (its attempt is over)."""
        old = _pod_name(entry)
        evaluation = entry.rollout_status.evaluation if entry.phase == Phase.EVALUATING else None
        replay, turns = retries.replay_status(entry, reason, utcnow().replace(microsecond=0))
        start = f"its checkpoint at turn {turns}" if turns else "the beginning (no checkpoint yet)"
        attempt = max(1, entry.rollout_status.attempts)
        applied = await self.transition(
            entry,
            Trigger.RETRY,
            reason=reason,
            message=f"{cause}; attempt {attempt + 1} of {entry.rollout_spec.sandbox.max_attempts} replays from {start}",
            extra=replay,
            warning=True,
        )
        if applied:
            # The eval pod too, when it reported an ungradeable autosubmission: its work is over.
            for pod in (old, evaluation.pod_name if evaluation is not None else None):
                if pod:
                    await self.objects.delete_pod(entry.namespace, pod)
        return applied

    async def _reconcile_aborted(self, entry: Tracked) -> None:
        if not self.suspended(entry):
            wait = self._report_grace_left(entry)
            if wait > 0:
                # Its runner was told to resume (observe_batch) and its report is the one
                # transition needed; a pass that comes first for another reason (the one
                # its abort report queued, a label) would write Resuming in its way.
                self.requeue_after(entry.uid, wait)
                return
            key = entry.batch_key
            why = "spec.suspend is false" + (
                f", on the rollout and on SWERolloutBatch {key[1]}" if key and self.batches.get(key) else ""
            )
            await self.transition(entry, Trigger.RESUME_REQUESTED, reason="ResumeRequested", message=why)
            return
        sandbox = entry.rollout_status.sandbox or api.SandboxHandle()
        if sandbox.reclaimed_at:
            return
        pod_name = sandbox.pod_name
        if keepalive_expired(entry):
            keep = entry.rollout_spec.sandbox.keep_alive_seconds_after_abort
            if pod_name:
                await self.objects.delete_pod(entry.namespace, pod_name)
            await warm.release_prewarmed_eval(self, entry)
            await self._mark_reclaimed(
                entry,
                f"pod {pod_name} reclaimed after keepAliveSecondsAfterAbort ({keep}s); "
                "a resume replays the recorded actions into a fresh pod",
            )
            self.post_event(entry, reason="SandboxReclaimed", message=f"pod {pod_name} deleted after {keep}s aborted")
            return
        _, _, gone = await self.sandbox_pod(entry)
        if gone:
            await self._mark_reclaimed(
                entry, f"pod {pod_name} is gone; a resume replays the recorded actions into a fresh pod"
            )

    async def _mark_reclaimed(self, entry: Tracked, message: str) -> None:
        handle = _sandbox(reclaimed_at=utcnow().replace(microsecond=0))
        await self.write_status(entry, api.SWERolloutStatus(sandbox=handle, message=phases.cut_message(message)))

    async def _ensure_resume_pod(self, entry: Tracked) -> None:
        """Resume on the same pod when it is alive; otherwise replay into a fresh one."""
        sandbox = entry.rollout_status.sandbox or api.SandboxHandle()
        current, state, gone = (None, None, True) if sandbox.reclaimed_at else await self.sandbox_pod(entry)
        if current is not None and state is not None and not gone:
            if state.ready and sandbox.pod_ip != state.pod_ip:
                await self.write_status(entry, api.SWERolloutStatus(sandbox=_handle(current, state)))
            elif state.waits_for is not None:
                # A replay pod no node can take yet (or Kueue has not admitted): the phase
                # stays Resuming, as for a quota refusal, and the message says what it waits for.
                detail = f"pod {current['metadata']['name']}: {state.message or state.reason}"
                message = phases.cut_message(f"waiting for capacity ({state.waits_for.value}): {detail}")
                await self.write_status(entry, api.SWERolloutStatus(message=message))  # skipped when unchanged
            return
        attempt = max(1, entry.rollout_status.attempts) + 1
        if attempt > entry.rollout_spec.sandbox.max_attempts:
            await self.transition(
                entry,
                Trigger.FAILED,
                reason="TooManyAttempts",
                message=f"the sandbox pod was lost {attempt - 1} times; giving up",
                warning=True,
            )
            return
        pod = await self.objects.ensure_pod(entry, attempt, role="rollout")
        self.metrics.replays.inc()
        # A merge patch: explicit nulls clear what described the old pod.
        handle = _sandbox(
            pod_name=pod["metadata"]["name"],
            pod_uid=pod["metadata"]["uid"],
            pod_ip=None,
            node_name=None,
            started_at=None,
            reclaimed_at=None,
        )
        await self.transition(
            entry,
            Trigger.REPLAY_STARTED,
            reason="ReplayStarted",
            message=f"the sandbox pod was gone; replaying the recorded actions into {pod['metadata']['name']}",
            extra=api.SWERolloutStatus(attempts=attempt, replay=True, sandbox=handle),
        )

    async def _ensure_eval_pod(self, entry: Tracked) -> None:
        # The policy's sandbox is done: the eval pod never sees it.
        for pod in self.pods.owned_by(entry.uid):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(api.LABEL_COMPONENT) != "eval" and not pod["metadata"].get("deletionTimestamp"):
                self._release_pod(entry.namespace, pod["metadata"]["name"])
        evaluation = entry.rollout_status.evaluation or api.EvaluationState()
        attempt = evaluation.attempt
        if evaluation.pod_name:
            current = await self.objects.pod(entry, evaluation.pod_name)
            state = read_pod(current) if current is not None else None
            going = current is not None and bool(current["metadata"].get("deletionTimestamp"))
            if current is None or going or (state is not None and state.failed):
                detail = f"{state.reason}: {state.message}" if state else "deleted"
                if not retries.eval_attempts_left(entry, attempt):
                    await self.transition(
                        entry,
                        Trigger.FAILED,
                        reason="EvalPodFailed",
                        message=f"eval pod {evaluation.pod_name} failed ({detail}) after {attempt} attempts",
                        warning=True,
                    )
                    return
                lost = attempt
                attempt += 1
            else:
                return
        else:
            lost = 0
        pod = await self.objects.ensure_pod(entry, attempt, role="eval")
        at = utcnow().replace(microsecond=0)
        status = api.SWERolloutStatus(
            evaluation=api.EvaluationState(attempt=attempt, pod_name=pod["metadata"]["name"], started_at=at)
        )
        if lost:
            # A failed eval pod is the infrastructure's (a test failure is a report, not a
            # failed pod): re-run, and recorded with the other retries.
            status.retries = retries.record(entry, "EvalPodFailed", at, attempt=lost)
            self.post_event(
                entry,
                reason="EvalPodFailed",
                message=f"eval pod {evaluation.pod_name} failed; re-running it as eval attempt {attempt}",
                warning=True,
            )
        await self.write_status(entry, status)

    async def _queue_timeout(self, entry: Tracked) -> None:
        queue = entry.rollout_status.queue
        limit = entry.rollout_spec.sandbox.queue_timeout_seconds
        why = queue.reason.value if queue is not None and queue.reason is not None else "capacity"
        self.metrics.startup_failures.labels("QueueTimeout").inc()
        await self.transition(
            entry,
            Trigger.STARTUP_FAILED,
            reason="QueueTimeout",
            message=f"waited queueTimeoutSeconds ({limit}s) for capacity ({why}): {entry.rollout_status.message}",
            warning=True,
        )

    async def _startup_timeout(self, entry: Tracked) -> None:
        pod_name = _pod_name(entry) or podspec.rollout_pod_name(entry.name, 1)
        pod = await self.objects.pod(entry, pod_name)
        if pod is None:
            detail = "the pod does not exist" + (f"; last error: {entry.last_error}" if entry.last_error else "")
        else:
            state = read_pod(pod)
            detail = f"{state.reason}: {state.message}" if state.message else state.reason
        self.metrics.startup_failures.labels("Timeout").inc()
        await self.transition(
            entry,
            Trigger.STARTUP_FAILED,
            reason="StartupTimeout",
            message=f"sandbox pod {pod_name} not ready within startupTimeoutSeconds ({detail})",
            warning=True,
        )

    # -- the sweep: deadlines and coalesced progress ------------------------------

    async def sweep(self) -> None:
        """Once a second: rollouts whose deadline passed get a pass; due progress is written
        (in the background, a few at once). It costs O(rollouts due + bodies changed), not a
        look at every rollout: deadlines are a heap, unwritten progress a set."""
        touched, self.rollouts.touched = self.rollouts.touched, set()
        for uid in touched:
            entry = self.rollouts.entries.get(uid)
            if entry is not None:
                self.deadlines.update(entry)
        for uid in self.deadlines.pop_due(time.time()):
            if uid in self.rollouts.entries:
                self.requeue(uid)
            else:
                self.deadlines.forget(uid)
        for entry in self.progress.take_due(PROGRESS_WRITERS - self._progress_writing):
            self._progress_writing += 1
            self._spawn(self._flush_progress(entry))
        if time.monotonic() >= self._next_release:
            self._next_release = time.monotonic() + PARSED_IDLE_SECONDS / 4
            self.trimmer.after_release(self.rollouts.release_idle(PARSED_IDLE_SECONDS))
        self.refresh_gauges()

    async def _flush_progress(self, entry: Tracked) -> None:
        try:
            async with entry.lock:
                await self.progress.flush(entry)
        finally:
            self._progress_writing -= 1

    # -- runner reports (ingest API) ----------------------------------------------

    async def on_progress(self, entry: Tracked, progress: ProgressReport) -> None:
        await self.progress.report(entry, progress)

    async def on_runner_event(self, entry: Tracked, event: RunnerEvent) -> Ack:
        # The runner waits for this answer, which must follow the status write (an
        # acknowledged event survives a crash): its writes go before background ones.
        with urgent():
            waited = time.monotonic()
            async with entry.lock:
                self.metrics.report_lock_wait.observe(time.monotonic() - waited)
                applied = await self._apply_report(entry, event)
        await self.notify(entry)
        if applied:
            # The new phase may have work (resume an abort that a resume overtook, make
            # the eval pod, delete pods): our own write's echo will not ask for it.
            self.requeue(entry.uid)
        return Ack(ok=True, duplicate=not applied, phase=entry.phase.value)

    async def _apply_report(self, entry: Tracked, event: RunnerEvent) -> bool:
        """Apply phases.decide's decision on one report (entry.lock held); False when it no
        longer applies (a duplicate, or a report that moves no phase)."""
        # The report's log goes in the report's own write (one status write per report, not
        # two, on the path from a runner's finish to its reward), or alone when that write
        # does not happen.
        logs = None
        if event.log is not None and not entry.phase.is_terminal:
            logs = phases.log_status(entry.phase, event.log)
        status = entry.rollout_status
        context = phases.Context(
            told=self.assignment(entry, role="rollout", attempt=max(1, status.attempts)),
            progress=entry.progress,
            attempts_left=retries.attempts_left(entry),
            at=utcnow(),
        )
        decision = phases.decide(status, entry.rollout_spec, event, context)
        if decision.notice:
            self.post_event(entry, reason=decision.notice_reason, message=decision.notice, warning=True)
        if decision.status is not None and "progress" in decision.status.model_fields_set:
            # The run's final progress goes with this write: no coalesced one after it.
            entry.progress_dirty = False
        with_logs = phases.merged(decision.status, logs) if decision.status is not None else logs
        if decision.trigger is None:
            if with_logs is not None:
                await self.write_status(entry, with_logs)
            return False
        if decision.trigger is Trigger.RESUMED:
            self.metrics.resumes.inc()
        if decision.retry:
            if logs is not None:
                await self.write_status(entry, logs)
            return await self.retry(entry, reason=decision.reason, cause=decision.message)
        applied = await self.transition(
            entry,
            decision.trigger,
            reason=decision.reason,
            message=decision.message,
            extra=with_logs,
            warning=decision.warning,
        )
        if applied:
            self._count_report(entry, decision, status)
        elif logs is not None:
            await self.write_status(entry, logs)
        return applied

    def _count_report(self, entry: Tracked, decision: phases.Decision, before: api.SWERolloutStatus) -> None:
        """The metrics of a report that moved the phase (`before`: the status it met)."""
        if decision.trigger is Trigger.ABORTED:
            self.metrics.aborts.labels(abort_reason_label(decision.reason)).inc()
            if entry.abort_told_at:
                self.metrics.abort_fanout.observe(time.monotonic() - entry.abort_told_at)
                entry.abort_told_at = 0.0
        started = before.evaluation.started_at if before.evaluation is not None else None
        graded = decision.status is not None and "reward" in decision.status.model_fields_set
        if graded and before.phase == Phase.EVALUATING and started is not None:
            self.metrics.eval_duration.observe((utcnow() - started).total_seconds())

    # -- deletion ----------------------------------------------------------------

    async def cleanup(self, body: dict[str, Any]) -> None:
        """Delete everything the rollout made. Owner references would do it in a full
        cluster, but the finalizer makes it immediate and also works where no garbage
        collector runs (the embedded dev mode)."""
        meta = body["metadata"]
        await self.objects.delete_all(meta)
        for hook in self.on_deleted_rollout:
            await hook(meta["namespace"], meta["name"], meta["uid"])
        entry = self.rollouts.forget(meta["uid"])
        if entry is not None:
            await self.notify(entry)

    async def aclose(self) -> None:
        await self.trimmer.aclose()
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


def _pod_name(entry: Tracked) -> str | None:
    sandbox = entry.rollout_status.sandbox
    return sandbox.pod_name if sandbox is not None else None


def _sandbox(**fields: Any) -> api.SandboxHandle:
    """A SandboxHandle from the fields given (only those go into its patch)."""
    return api.SandboxHandle.model_validate(fields)


def _owned(obj: dict[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])


def _handle(pod: dict[str, Any], state: PodState) -> api.SandboxHandle:
    return _sandbox(
        pod_name=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        pod_ip=state.pod_ip,
        node_name=state.node_name,
        started_at=utcnow().replace(microsecond=0),
    )
