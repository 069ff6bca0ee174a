"""Shards owned through Leases: which rollouts this replica of the operator handles.

With `--shards S` the rollouts are split into S shards (swerollout.api.shards: a stable
hash of namespace/name, the `swerollout.io/shard` label). Shard k is owned by whoever
holds the Lease `swerollout-shard-<k>` in the operator's namespace; every replica also
renews a Lease of its own (`swerollout-replica-<id>`) so that the others know it is alive.

Each step (every RENEW_SECONDS) a replica lists the Leases, renews the shards it holds,
takes free or expired ones up to its fair share (ceil(S / live replicas)), and hands back
any above that share, after it stopped handling them. A Lease is expired when its
resourceVersion has not moved for LEASE_SECONDS by this replica's own clock (client-go's
leader election rule: no trust in other machines' clocks). A replica that cannot renew
a shard for RENEW_DEADLINE_SECONDS (< LEASE_SECONDS) stops handling it first, so two
replicas never handle one shard at once; a dead one's shards move within LEASE_SECONDS
plus a step (about 20 s).

The Lease carries the holder's ingest address (an annotation): a replica asked by a
runner of a shard it does not own answers 421 with that address (ingest.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from swerollout.api.shards import shard_of
from swerollout.kube import LEASES, AsyncKubeClient, Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
RENEW_SECONDS = 5.0
RENEW_DEADLINE_SECONDS = 10.0
LABEL_LEASE = "swerollout.io/lease"
ANNOTATION_INGEST = "swerollout.io/ingest-url"


def shard_lease_name(k: int) -> str:
    return f"swerollout-shard-{k}"


def replica_lease_name(identity: str) -> str:
    return f"swerollout-replica-{identity}"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Seen:
    """A Lease as this replica last saw it, and since when (monotonic) it has not moved."""

    version: str
    since: float
    holder: str
    url: str
    body: dict[str, Any]


class ShardLeases:
    def __init__(
        self,
        kube: AsyncKubeClient,
        namespace: str,
        shards: int,
        identity: str,
        ingest_url: str,
        on_change: Callable[[frozenset[int]], None],
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.shards = shards
        self.identity = identity
        self.ingest_url = ingest_url
        self.on_change = on_change
        self.owned: frozenset[int] = frozenset()
        self._renewed: dict[int, float] = {}
        """shard -> when (monotonic) this replica last renewed it."""
        self._seen: dict[str, _Seen] = {}
        self._task: asyncio.Task[None] | None = None

    # -- what the rest of the operator asks -------------------------------------------

    def owns(self, namespace: str, name: str) -> bool:
        return shard_of(namespace, name, self.shards) in self.owned

    def owner_url(self, namespace: str, name: str) -> str | None:
        """The ingest address of the live holder of this rollout's shard (None: nobody holds it now)."""
        seen = self._seen.get(shard_lease_name(shard_of(namespace, name, self.shards)))
        if seen is None or seen.holder in ("", self.identity) or self._expired(seen):
            return None
        return seen.url or None

    # -- the loop ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="swerollout-shard-leases")

    async def stop(self) -> None:
        """Hand every held shard back (a clean shutdown: the others take them at once)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        held = sorted(self.owned)
        self._set_owned(frozenset())
        for k in held:
            seen = self._seen.get(shard_lease_name(k))
            if seen is not None:
                await self._write(k, seen.body, holder="")

    async def _run(self) -> None:
        while True:
            try:
                # Bounded: a step stuck on a slow API server must not keep a shard past its deadline.
                await asyncio.wait_for(self.step(), RENEW_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed step is retried; the deadline drops shards in time
                log.warning("shard lease step failed (%s: %s)", type(exc).__name__, exc)
            self._drop_overdue()
            await asyncio.sleep(RENEW_SECONDS)

    def _expired(self, seen: _Seen) -> bool:
        return time.monotonic() - seen.since >= LEASE_SECONDS

    async def _list(self) -> None:
        listing = await self.kube.list(LEASES, self.namespace, label_selector=LABEL_LEASE)
        now = time.monotonic()
        fresh: dict[str, _Seen] = {}
        for item in listing["items"]:
            meta = item["metadata"]
            old = self._seen.get(meta["name"])
            version = meta["resourceVersion"]
            since = old.since if old is not None and old.version == version else now
            spec = item.get("spec") or {}
            url = (meta.get("annotations") or {}).get(ANNOTATION_INGEST, "")
            fresh[meta["name"]] = _Seen(version, since, spec.get("holderIdentity") or "", url, item)
        self._seen = fresh

    def _lease(self, name: str, kind: str, holder: str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {LABEL_LEASE: kind},
                "annotations": {ANNOTATION_INGEST: self.ingest_url if holder else ""},
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": LEASE_SECONDS,
                "acquireTime": _micro_time(),
                "renewTime": _micro_time(),
            },
        }

    async def _write(self, k: int, body: dict[str, Any] | None, *, holder: str) -> bool:
        """Create or replace shard k's Lease (optimistically: a replace names the version it
        read, so of two replicas taking one Lease only one succeeds). True on success."""
        name = shard_lease_name(k)
        new = self._lease(name, "shard", holder)
        try:
            if body is None:
                await self.kube.create(LEASES, new, self.namespace)
            else:
                spec = body.get("spec") or {}
                if spec.get("holderIdentity") == holder and holder:
                    new["spec"]["acquireTime"] = spec.get("acquireTime") or new["spec"]["acquireTime"]
                    new["spec"]["leaseTransitions"] = spec.get("leaseTransitions") or 0
                else:
                    new["spec"]["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
                new["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
                await self.kube.replace(LEASES, new, self.namespace)
        except (Conflict, NotFound):
            return False
        return True

    async def _renew_replica(self) -> None:
        name = replica_lease_name(self.identity)
        seen = self._seen.get(name)
        body = self._lease(name, "replica", self.identity)
        try:
            if seen is None:
                await self.kube.create(LEASES, body, self.namespace)
            else:
                body["metadata"]["resourceVersion"] = seen.body["metadata"]["resourceVersion"]
                await self.kube.replace(LEASES, body, self.namespace)
        except (Conflict, NotFound):
            pass  # the next step reads it again

    async def step(self) -> None:
        await self._list()
        await self._renew_replica()
        now = time.monotonic()
        live = {self.identity} | {
            s.holder
            for name, s in self._seen.items()
            if name.startswith("swerollout-replica-") and s.holder and not self._expired(s)
        }
        share = math.ceil(self.shards / len(live))
        # Still ours: held by us in the listing (not taken over after missed renewals).
        owned = {k for k in self.owned if getattr(self._seen.get(shard_lease_name(k)), "holder", "") == self.identity}
        extra = sorted(owned)[share:]
        if extra:
            # Above our share (a replica came back): stop handling first, then let go, so
            # two replicas never handle one shard at once.
            owned -= set(extra)
            self._set_owned(frozenset(k for k in self.owned if k in owned))
            for k in extra:
                await self._write(k, self._seen[shard_lease_name(k)].body, holder="")
        for k in sorted(owned):
            try:
                if await self._write(k, self._seen[shard_lease_name(k)].body, holder=self.identity):
                    self._renewed[k] = now
                else:
                    owned.discard(k)  # written by another meanwhile
            except KubeError as exc:
                log.warning("renewing shard %d failed: %s", k, exc)
        owned = {k for k in owned if now - self._renewed.get(k, 0.0) < RENEW_DEADLINE_SECONDS}
        for k in range(self.shards):
            if len(owned) >= share:
                break
            if k in owned:
                continue
            seen = self._seen.get(shard_lease_name(k))
            # Ours already: a write whose answer was cut off (a step timed out), or a
            # restarted container of this pod (the old one is gone).
            free = seen is None or seen.holder in ("", self.identity) or self._expired(seen)
            if free and await self._write(k, seen.body if seen else None, holder=self.identity):
                owned.add(k)
                self._renewed[k] = time.monotonic()
                log.info("took shard %d (%s)", k, "new" if seen is None else seen.holder or "free")
        changed = frozenset(owned) != self.owned
        self._set_owned(frozenset(owned))
        if extra or changed:
            await self._list()

    def _drop_overdue(self) -> None:
        now = time.monotonic()
        self._set_owned(frozenset(k for k in self.owned if now - self._renewed.get(k, 0.0) < RENEW_DEADLINE_SECONDS))

    def _set_owned(self, owned: frozenset[int]) -> None:
        if owned == self.owned:
            return
        log.warning("%s: shards owned %s -> %s", self.identity, sorted(self.owned), sorted(owned))
        self.owned = owned
        self.on_change(owned)
