"""Watch-fed caches: what the operator knows of its rollouts, their pods and their batches.

Reconciles read these, never the API server: a watch event (or the response to
one of our own writes) is the only way in. The rollout cache also knows which
resourceVersions we wrote ourselves, so the watch echo of our own status write
is recognised and does not cause another reconcile.

No Secret cache: watching Secrets needs list/watch on every Secret of the
namespace, which the chart deliberately does not grant. A rollout's Secret is
deterministic, so "ensured once by this process" is all the state it needs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase, batch_name
from swerollout.wire.ingest import Assignment, ProgressReport

PodKey = tuple[str, str]
BatchKey = tuple[str, str]
"""(namespace, batch name): a batch is the rollouts of one namespace sharing the batch label."""


def _rv(body: dict[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("resourceVersion") or 0)


def _relevant(body: dict[str, Any]) -> tuple[Any, ...]:
    """What a pass depends on. Annotation-only writes (kopf's own bookkeeping, kubectl's
    last-applied) and managedFields change the resourceVersion and nothing else."""
    meta = body.get("metadata") or {}
    return (
        body.get("spec"),
        body.get("status"),
        meta.get("labels"),
        meta.get("deletionTimestamp"),
        meta.get("finalizers"),
        meta.get("generation"),
    )


_ROLLOUT_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "finalizers",
)
_POD_META = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "labels", "ownerReferences")


_SHORT = 64
"""Strings up to this length are interned: keys, phases, reasons, images, node names."""


def _pick(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {_interned(k): _interned(d[k]) for k in keys if k in d}


def _interned(value: Any) -> Any:
    """The value with its short strings interned. JSON decoding makes a new string for
    every key of every body, so 2,000 cached rollouts and their pods held 2,000 copies of
    "metadata", "containerStatuses", "True"...; interned, they share one. (CPython drops an
    interned string when its last user goes, so unique names and uids do not pile up.)"""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _SHORT else value
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def trim_rollout(body: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a rollout. managedFields and annotations (kubectl's
    last-applied copy of the whole spec, kopf's bookkeeping) are most of a body's bytes
    and nothing reads them: at 2,000 rollouts that is most of the cache."""
    out = {"metadata": _pick(body.get("metadata") or {}, _ROLLOUT_META)}
    for key in ("spec", "status"):
        if key in body:
            out[key] = _interned(body[key])
    return out


_POD_STATUS = ("phase", "podIP", "reason", "message")
_POD_CONDITIONS = frozenset({"Ready", "PodScheduled"})
_CONDITION_FIELDS = ("type", "status", "reason", "message")
_CONTAINER_STATUS_FIELDS = ("name", "image", "state")
_CONTAINER_STATUSES = ("initContainerStatuses", "containerStatuses")


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a pod (podstatus.py): its identity and owner, each
    container's name and image, the node and scheduling gates, and of the status the phase, IP, reason, the
    Ready and PodScheduled conditions and each container's state. The kubelet's
    timestamps, image and container ids, restart counts, resources and mounts are most of
    a running pod's status and nothing reads them."""
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {"metadata": _pick(pod.get("metadata") or {}, _POD_META)}
    out["spec"] = {
        "nodeName": _interned(spec.get("nodeName")),
        **({"schedulingGates": _interned(spec["schedulingGates"])} if spec.get("schedulingGates") else {}),
        **{key: [_pick(c, ("name", "image")) for c in spec.get(key) or []] for key in ("initContainers", "containers")},
    }
    if "status" in pod:
        status = pod["status"] or {}
        trimmed = _pick(status, _POD_STATUS)
        trimmed["conditions"] = [
            _pick(c, _CONDITION_FIELDS) for c in status.get("conditions") or [] if c.get("type") in _POD_CONDITIONS
        ]
        for key in _CONTAINER_STATUSES:
            if key in status:
                trimmed[key] = [_pick(cs, _CONTAINER_STATUS_FIELDS) for cs in status[key] or []]
        out["status"] = trimmed
    return out


def merge_delta(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The part of a JSON merge patch (RFC 7386) that would change `current`: {} when
    applying it changes nothing. Objects merge key by key; lists and scalars replace."""
    out: dict[str, Any] = {}
    for key, value in patch.items():
        have = current.get(key)
        if value is None:
            if have is not None:
                out[key] = None
        elif isinstance(value, dict):
            # Into a missing object, its nulls clear nothing and are left out.
            inner = merge_delta(have if isinstance(have, dict) else {}, value)
            if inner or not isinstance(have, dict):
                out[key] = inner
        elif value != have:
            out[key] = value
    return out


@dataclass(slots=True)
class Tracked:
    """The operator's view of one rollout: the latest body, its spec parsed once, and
    this process's bookkeeping (rebuilt from the API after a restart). Slotted: one per
    rollout, thousands at once, and a slot costs less than a dict entry."""

    namespace: str
    name: str
    uid: str
    _body: dict[str, Any]
    """The trimmed body as the API server last sent it: read through the typed views below
    (rollout_spec, rollout_status) or the few raw ones (wire_spec, meta); only this module
    touches it."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    own_versions: set[int] = field(default_factory=set)
    """resourceVersions of our own status writes whose watch echo has not arrived yet."""
    writes_in_flight: int = 0
    held: set[int] = field(default_factory=set)
    """resourceVersions of news that arrived while our write was in flight: the watch can
    deliver our own write's echo before its response, so they are judged after it."""
    secret_ready: bool = False
    pod_created_at: float | None = None
    quota_retries: int = 0
    """Consecutive creates of its pod refused for quota (the retry backs off; 0: not waiting for quota)."""
    last_error: str | None = None
    """The last failure of a reconcile (retried with backoff), named if the startup deadline passes."""
    told_at: float = 0.0
    """When its batch's change last told its runner, in memory, to abort or resume
    (monotonic seconds): its report is due within --runner-report-grace-seconds."""
    abort_told_at: float = 0.0
    """When its runner was first told to abort while it ran (monotonic seconds; 0: not
    told): the start of swerollout_abort_fanout_seconds, which its Aborted report ends."""
    phase_since: float = field(default_factory=time.monotonic)
    """When this process first saw the rollout in its current phase (monotonic seconds)."""
    progress: ProgressReport | None = None
    progress_dirty: bool = False
    progress_written_at: float = 0.0
    generated_reported: int = 0
    _parsed: tuple[int, api.SWERolloutSpec] | None = None
    # What is derived from one body, computed at most once per body (keyed by identity:
    # every new body is a new dict). The sweep and the long polls read these often.
    _phase: tuple[dict[str, Any], Phase] | None = None
    _status: tuple[dict[str, Any], api.SWERolloutStatus] | None = None
    deadline: tuple[object, float | None] | None = None
    """deadlines.py's next deadline (epoch seconds) for this body."""
    answers: tuple[object, dict[tuple[str, int], tuple[BatchState | None, Assignment]]] | None = None
    """What its runners were last told, by (role, attempt), for one body (the reconciler's
    memo of phases.assignment_for): a long poll at rest answers from it, so the parsed models it
    was worked out from can be released (release_parsed)."""
    parsed_used_at: float = 0.0
    """When the parsed spec or status was last read (monotonic seconds); see release_parsed."""

    @property
    def phase(self) -> Phase:
        if self._phase is None or self._phase[0] is not self._body:
            self._phase = (self._body, Phase((self._body.get("status") or {}).get("phase", Phase.PENDING.value)))
        return self._phase[1]

    @property
    def rollout_status(self) -> api.SWERolloutStatus:
        """The status as the API model, parsed once per body."""
        self.parsed_used_at = time.monotonic()
        if self._status is None or self._status[0] is not self._body:
            self._status = (self._body, api.SWERolloutStatus.model_validate(self._wire_status))
        return self._status[1]

    def release_parsed(self, unused_since: float) -> bool:
        """Drop the parsed spec and status if neither was read since `unused_since`
        (monotonic): a rollout at rest (running, its runner in a long poll, which answers
        from the body) reads neither, and the two models are more than the body itself
        (13 KiB a rollout, 40 MB at 3,000). The next read parses again. True if released."""
        if self.parsed_used_at >= unused_since or (self._parsed is None and self._status is None):
            return False
        self._parsed = self._status = None
        return True

    def status_delta(self, status: api.SWERolloutStatus) -> dict[str, Any]:
        """The merge patch that writes the partial `status` (its set fields) over the cached
        one, cut to what differs; {} when the write would change nothing."""
        return merge_delta(self._wire_status, status.to_patch())

    @property
    def meta(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "labels": (self._body.get("metadata") or {}).get("labels") or {},
        }

    @property
    def _wire_status(self) -> dict[str, Any]:
        return self._body.get("status") or {}

    @property
    def batch_key(self) -> BatchKey | None:
        name = batch_name((self._body.get("metadata") or {}).get("labels"))
        return (self.namespace, name) if name else None

    @property
    def wire_spec(self) -> dict[str, Any]:
        """The spec as stored (camelCase): what a runner is sent. Decisions read rollout_spec."""
        return self._body.get("spec") or {}

    @property
    def revision(self) -> object:
        """Changes (by identity) with every new body: a key for what is derived from one."""
        return self._body

    @property
    def deleting(self) -> bool:
        return bool((self._body.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def resource_version(self) -> str:
        return str((self._body.get("metadata") or {}).get("resourceVersion") or "")

    @property
    def created_at(self) -> datetime | None:
        """metadata.creationTimestamp (the startup deadline counts from it)."""
        value = (self._body.get("metadata") or {}).get("creationTimestamp")
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None

    @property
    def generation(self) -> int | None:
        value = (self._body.get("metadata") or {}).get("generation")
        return int(value) if value is not None else None

    @property
    def rollout_spec(self) -> api.SWERolloutSpec:
        """The spec as the API model, parsed once per generation (status writes do not re-parse it)."""
        generation = self.generation or 0
        self.parsed_used_at = time.monotonic()
        if self._parsed is None or self._parsed[0] != generation:
            self._parsed = (generation, api.SWERolloutSpec.model_validate(self.wire_spec))
        return self._parsed[1]


class RolloutCache:
    def __init__(self) -> None:
        self.entries: dict[str, Tracked] = {}
        self._by_batch: dict[BatchKey, set[str]] = {}
        self._batch_of: dict[str, BatchKey] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        """(namespace, name) -> uid of its newest incarnation: the trainer's results endpoint
        finds a rollout by name, and scanning every entry was O(n) per request (a trainer
        collecting a batch of 20,000 made 400 million comparisons)."""
        self.touched: set[str] = set()
        """uids whose body changed since the sweep last looked (it reschedules their deadlines)."""
        self._counts: dict[Phase, int] = {p: 0 for p in Phase}
        """Rollouts by phase, kept as bodies change: every transition refreshes the phase
        gauges, and counting all entries each time was O(n) per transition (a batch abort
        of 500 among 2,000 tracked: a million phase reads)."""

    def _set_body(self, entry: Tracked, body: dict[str, Any]) -> None:
        """The one way a cached body changes, so the phase counts stay true."""
        before = entry.phase
        # An entry already forgotten (its shard went to another replica, or it was deleted)
        # still gets the responses of writes it had in flight: it is no longer counted, so
        # its phase change must not move the counts (they went negative on a 2-replica run).
        counted = self.entries.get(entry.uid) is entry
        if counted:
            self._counts[before] -= 1
        entry._body = body
        if counted:
            self.touched.add(entry.uid)
            self._counts[entry.phase] += 1
        if entry.phase != before:
            entry.phase_since = time.monotonic()

    def _index(self, entry: Tracked) -> None:
        """Keep the batch -> members index true for this entry (its label may change)."""
        key = entry.batch_key
        old = self._batch_of.get(entry.uid)
        if old == key:
            return
        if old is not None:
            self._unindex(entry.uid)
        if key is not None:
            self._batch_of[entry.uid] = key
            self._by_batch.setdefault(key, set()).add(entry.uid)

    def _unindex(self, uid: str) -> None:
        key = self._batch_of.pop(uid, None)
        if key is not None and key in self._by_batch:
            self._by_batch[key].discard(uid)
            if not self._by_batch[key]:
                del self._by_batch[key]

    def members(self, key: BatchKey) -> list[Tracked]:
        """The rollouts this process tracks that carry the batch's label."""
        return [self.entries[uid] for uid in sorted(self._by_batch.get(key, ())) if uid in self.entries]

    def observe(self, body: dict[str, Any]) -> tuple[Tracked, bool]:
        """Take the latest state of a rollout; returns the entry and whether this body is
        news (False for the watch echo of our own write, or anything older than we hold)."""
        meta = body["metadata"]
        entry = self.entries.get(meta["uid"])
        if entry is None:
            entry = self.entries[meta["uid"]] = Tracked(
                meta["namespace"], meta["name"], meta["uid"], trim_rollout(body)
            )
            self._counts[entry.phase] += 1
            self._index(entry)
            self._by_name[(entry.namespace, entry.name)] = entry.uid
            self.touched.add(entry.uid)
            return entry, True
        new_rv = _rv(body)
        if new_rv in entry.own_versions:
            entry.own_versions = {v for v in entry.own_versions if v > new_rv}
            return entry, False
        # Watch events can arrive out of order with our own patch responses.
        if new_rv < _rv(entry._body):
            return entry, False
        body = trim_rollout(body)
        news = _relevant(body) != _relevant(entry._body)
        self._set_body(entry, body)
        self._index(entry)
        if news and entry.writes_in_flight:
            entry.held.add(new_rv)
            return entry, False
        return entry, news

    def observe_own(self, entry: Tracked, body: dict[str, Any] | None) -> bool:
        """The response to our own write (None: the write failed): the newest state, and an
        echo to ignore later. True when news held during the write still needs a pass."""
        entry.writes_in_flight -= 1
        rv = _rv(body) if body is not None else -1
        if body is not None:
            if rv in entry.held:
                entry.held.discard(rv)  # the echo came first
            else:
                entry.own_versions.add(rv)
            if rv >= _rv(entry._body):
                self._set_body(entry, trim_rollout(body))
        if entry.writes_in_flight:
            return False
        news = bool(entry.held)
        entry.held.clear()
        return news

    def forget(self, uid: str) -> Tracked | None:
        self._unindex(uid)
        self.touched.discard(uid)
        entry = self.entries.pop(uid, None)
        if entry is not None:
            self._counts[entry.phase] -= 1
            if self._by_name.get((entry.namespace, entry.name)) == uid:
                del self._by_name[(entry.namespace, entry.name)]
        return entry

    def release_idle(self, idle_seconds: float) -> int:
        """Drop the parsed models of rollouts that nothing read for `idle_seconds`; returns how many."""
        unused_since = time.monotonic() - idle_seconds
        return sum(entry.release_parsed(unused_since) for entry in self.entries.values())

    def lookup(self, namespace: str, name: str, uid: str) -> Tracked | None:
        entry = self.entries.get(uid)
        if entry is None or entry.namespace != namespace or entry.name != name:
            return None
        return entry

    def find(self, namespace: str, name: str) -> Tracked | None:
        uid = self._by_name.get((namespace, name))
        return self.entries.get(uid) if uid is not None else None

    def phase_counts(self) -> dict[Phase, int]:
        return dict(self._counts)

    def oldest_in_phase(self) -> dict[Phase, float]:
        """Seconds the longest-resident rollout of each unfinished phase has been in it (a
        scrape reads it: one pass over the entries, nothing kept per rollout but a float)."""
        now = time.monotonic()
        oldest: dict[Phase, float] = {}
        for entry in self.entries.values():
            phase = entry.phase
            if not phase.is_terminal:
                oldest[phase] = max(oldest.get(phase, 0.0), now - entry.phase_since)
        return oldest


def controller_uid(pod: dict[str, Any]) -> str | None:
    owner = next(
        (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == api.KIND and o.get("controller")),
        None,
    )
    return str(owner["uid"]) if owner else None


class PodCache:
    """The pods of our rollouts (the operator watches pods by the rollout label)."""

    def __init__(self) -> None:
        self.pods: dict[PodKey, dict[str, Any]] = {}
        self._by_owner: dict[str, set[PodKey]] = {}

    def update(self, pod: dict[str, Any], *, deleted: bool = False) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        owner = controller_uid(pod)
        old = self.pods.get(key)
        if deleted:
            if old is not None and old["metadata"].get("uid") == pod["metadata"].get("uid"):
                self._drop(key)
            return
        if old is not None and _rv(pod) < _rv(old) and old["metadata"].get("uid") == pod["metadata"].get("uid"):
            return
        if old is not None:
            self._drop(key)
        self.pods[key] = trim_pod(pod)
        if owner:
            self._by_owner.setdefault(owner, set()).add(key)

    def _drop(self, key: PodKey) -> None:
        old = self.pods.pop(key, None)
        owner = controller_uid(old) if old else None
        if owner and owner in self._by_owner:
            self._by_owner[owner].discard(key)
            if not self._by_owner[owner]:
                del self._by_owner[owner]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def forget_owner(self, uid: str) -> None:
        """Drop the pods of a rollout this process no longer handles."""
        for key in sorted(self._by_owner.get(uid, ())):
            self._drop(key)

    def owned_by(self, uid: str) -> list[dict[str, Any]]:
        return [self.pods[k] for k in sorted(self._by_owner.get(uid, ()))]


@dataclass(frozen=True)
class BatchState:
    """What the operator knows of one SWERolloutBatch: its spec, and its generation (which
    moves with every spec change, so an abort of the batch is told apart from the last one)."""

    spec: api.SWERolloutBatchSpec
    generation: int


class BatchCache:
    """The SWERolloutBatch objects of the watched namespaces (their spec only)."""

    def __init__(self) -> None:
        self.batches: dict[BatchKey, BatchState] = {}

    def get(self, key: BatchKey | None) -> BatchState | None:
        return self.batches.get(key) if key is not None else None

    def observe(self, body: dict[str, Any], *, deleted: bool = False) -> BatchKey | None:
        """Take the latest state of a batch; returns its key when what its members are told
        changed (a deleted batch no longer suspends anyone), else None."""
        meta = body.get("metadata") or {}
        key: BatchKey = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        old = self.batches.get(key)
        if deleted:
            self.batches.pop(key, None)
            return key if old is not None else None
        try:
            spec = api.SWERolloutBatchSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            # The CRD's schema is the model's, so only an object written past it lands here:
            # keep the last good state rather than resuming (or suspending) a whole batch.
            return None
        state = BatchState(spec=spec, generation=int(meta.get("generation") or 0))
        self.batches[key] = state
        return key if old != state else None
