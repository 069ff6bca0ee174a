"""Abort and resume: suspending a batch with one write to its SWERolloutBatch, or each named
rollout with its own conditional patch, and stopping the inference side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import httpx

from swerollout import fleet
from swerollout.api.v1alpha1 import BATCH_PLURAL, GROUP, batch_name
from swerollout.backoff import Backoff
from swerollout.client.core import (
    FIELD_MANAGER,
    INFERENCE_ADMIN_KEY_ENV,
    MARK_PARALLEL_REQUESTS,
    PARALLEL_REQUESTS,
    ClientCore,
    Object,
    RacesLost,
    kube_error,
    log,
    name_of,
    own_suspend,
    read_modify_write,
    unfinished,
)
from swerollout.client.errors import ClientConfigError, KubeApiError
from swerollout.client.records import parse_status
from swerollout.kube import SWEROLLOUTS, KubeError, NotFound

T = TypeVar("T")
U = TypeVar("U")

# spec.inference.weightVersion's maxLength in the CRD.
MAX_WEIGHT_VERSION = 128
# One /abort_request may take this long (seconds); the runners abort their own requests
# by rid anyway, so a server that does not answer only delays abort()'s return.
INFERENCE_ABORT_TIMEOUT = 5.0
# Optimistic-concurrency retries of one abort/resume patch before giving up.
MAX_CONFLICT_RETRIES = 5
# Transient failures of one abort/resume mark (reset, 429, 5xx) are retried this long:
# a trainer's abort must ride out an API server restart of a few seconds.
MARK_BACKOFF = Backoff(first_seconds=0.2, max_seconds=5.0, budget_seconds=30.0)


async def _both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Both at once; when one fails the other is cancelled (not left running after the
    call has failed, and after the client is closed), and the failure is raised as is."""
    a, b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        return await a, await b
    except BaseException:
        for task in (a, b):
            task.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
        raise


class Suspending(ClientCore):
    """abort and resume of the client."""

    async def abort(
        self,
        batch: str | None = None,
        *,
        names: Iterable[str] | None = None,
        inference: bool | None = None,
        admin_key: str | None = None,
    ) -> list[str]:
        """Stop generation now and suspend every unfinished member of ``batch`` (or each
        rollout in ``names``), keeping its pod; returns the names that were not suspended
        before.

        With ``inference`` (the default for a batch), also the inference side, so the
        GPUs are free at once: one ``/abort_request`` (``abort_all``) per inference server
        the rollouts use. SGLang matches abort rids exactly, so a batch cannot be aborted
        by a rid prefix; rollouts of other batches on the same server are not suspended by
        it: their runners re-sample the turn.

        A batch is suspended, at the same time, with ONE write: ``spec.suspend: true`` on its
        SWERolloutBatch (created if needed), which suspends every member, those created
        later included; the operator tells every runner at once, and each aborts its own
        request by its exact rid. ``names`` set each rollout's own ``spec.suspend``
        (concurrent patches); the default there is to only mark, so other rollouts on the
        same server lose nothing.

        ``admin_key``: the servers' admin key (SGLang's ``--admin-api-key``, or its
        ``--api-key`` when it has no admin key), sent as ``Authorization: Bearer`` on
        ``/abort_request``; defaults to the client's ``inference_admin_key``, else
        ``$SWEROLLOUT_INFERENCE_ADMIN_KEY``. A server that refuses the abort (401) is
        logged; the runners still abort their own requests with the keys their specs name.
        """
        key = admin_key or self._inference_admin_key
        stop_inference = inference if inference is not None else batch is not None
        if batch is not None and names is None and await self._batch_write_serves(batch):
            # The one write first, at once: reading 500 members takes seconds on a busy API
            # server, and every runner waits for the write, not for that list. The list (for
            # the servers to abort and the names to return) and the servers' aborts go on
            # at the same time; a slow or unreachable server only delays our return.
            async def listed() -> list[Object]:
                members = await self.list_rollouts(batch)
                if stop_inference:
                    await self._abort_inference(members, key)
                return members

            before, members = await _both(self._batches.set(batch, suspend=True), listed())
            if before is not None and before.suspend:
                return []
            return sorted(name_of(o) for o in members if unfinished(o) and not own_suspend(o))
        members = await self._targets(batch, names)
        marking = self._set_suspend(members, True)
        if not stop_inference:
            return await marking
        marked, _ = await _both(marking, self._abort_inference(members, key))
        return marked

    async def _batch_write_serves(self, batch: str) -> bool:
        """Whether abort/resume of `batch` is one write to its SWERolloutBatch (the CRD is
        served); UnknownBatch when it has no members. One small read, not the member list."""
        await self.check_cluster()
        if not await self._has_members(batch):
            raise self._unknown_batch(batch)
        return self._served_batches()

    async def resume(
        self, batch: str | None = None, *, names: Iterable[str] | None = None, weight_version: str | None = None
    ) -> list[str]:
        """Let every unfinished member of ``batch`` (or each rollout in ``names``) continue
        on its pod; returns the names that were suspended before.

        The mirror image of :meth:`abort`: for a batch, one write (``spec.suspend: false``
        on its SWERolloutBatch), plus clearing the own ``spec.suspend`` of members that
        were suspended by name. ``weight_version`` goes into the same write
        (the batch's ``spec.weightVersion``, or each named rollout's
        ``spec.inference.weightVersion``), so the resumed runs label their tokens with it
        where the server reports no version.

        Resuming by name a member of a suspended batch works: the batch's other unfinished
        members are first suspended by name, then the batch object is resumed, so they
        stay suspended throughout. An ``/abort_request`` leaves a server accepting
        requests, so there is nothing to undo there (a trainer that paused a server with
        ``/pause_generation`` continues it)."""
        if weight_version is not None and not 0 < len(weight_version) <= MAX_WEIGHT_VERSION:
            raise ClientConfigError(
                f"weight_version must be 1 to {MAX_WEIGHT_VERSION} characters, got {len(weight_version)}"
            )
        if batch is not None and names is None and await self._batch_write_serves(batch):
            # As abort(batch): the one write does not wait for the member list.
            before, members = await _both(
                self._batches.set(batch, suspend=False, weight_version=weight_version), self.list_rollouts(batch)
            )
            cleared = await self._set_suspend([o for o in members if own_suspend(o)], False)
            if before is not None and before.suspend:
                return sorted(name_of(o) for o in members if unfinished(o))
            return cleared
        members = await self._targets(batch, names)
        if batch is not None or not self._served_batches():  # a batch here: its CRD is not served
            return await self._set_suspend(members, False, weight_version=weight_version)
        split = await self._resume_out_of_batches(members, weight_version)
        cleared = await self._set_suspend(members, False, weight_version=weight_version)
        return sorted(set(cleared) | split)

    def _served_batches(self) -> bool:
        if not self._batch_crd:
            log.warning(
                "the API server does not serve %s.%s: suspending each rollout with its own patch; install the "
                "current CRDs (kubectl apply --server-side -f crds/) for batch-wide abort/resume in one write",
                BATCH_PLURAL,
                GROUP,
            )
        return self._batch_crd

    async def _resume_out_of_batches(self, members: list[Object], weight_version: str | None) -> set[str]:
        """Take named members out of their suspended batches (see :meth:`resume`); returns
        the names whose batch suspended them."""
        wanted = {name_of(o) for o in members}
        by_batch: dict[str, list[str]] = {}
        for obj in members:
            owner = batch_name((obj.get("metadata") or {}).get("labels"))
            if owner and unfinished(obj):
                by_batch.setdefault(owner, []).append(name_of(obj))
        freed: set[str] = set()
        for owner, named in sorted(by_batch.items()):
            spec = await self._batches.get_if_allowed(owner)
            if spec is None:
                continue
            if weight_version is not None and spec.weight_version and spec.weight_version != weight_version:
                raise ClientConfigError(
                    f"SWERolloutBatch {owner} sets spec.weightVersion={spec.weight_version!r}, which wins over "
                    f"{named[0]}'s own; resume the whole batch with resume({owner!r}, weight_version=...) instead"
                )
            if not spec.suspend:
                continue
            rest = [o for o in await self.members(owner) if name_of(o) not in wanted and not own_suspend(o)]
            await self._set_suspend(rest, True)
            await self._batches.set(owner, suspend=False)
            freed.update(named)
        return freed

    async def _targets(self, batch: str | None, names: Iterable[str] | None) -> list[Object]:
        """The objects one abort/resume acts on: a batch's members, or named rollouts."""
        if (batch is None) == (names is None):
            raise ClientConfigError("pass either a batch or names=[...] (exactly one of them)")
        if batch is not None:
            return await self.members(batch)
        wanted = sorted(set(names or ()))
        limit = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def one(name: str) -> Object:
            async with limit:
                return await self.get_rollout(name)

        return list(await asyncio.gather(*(one(n) for n in wanted)))

    async def _abort_inference(self, members: list[Object], admin_key: str | None) -> None:
        endpoints = sorted(
            {
                str(((o.get("spec") or {}).get("inference") or {}).get("endpoint") or "").rstrip("/")
                for o in members
                if not parse_status(o).phase.is_terminal
            }
            - {""}
        )

        headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}

        async def one(endpoint: str) -> None:
            # Every engine behind the endpoint: a gateway (smg) serves no /abort_request itself.
            async with httpx.AsyncClient(timeout=INFERENCE_ABORT_TIMEOUT) as http:
                answers = await fleet.abort_all(http, endpoint, headers=headers, timeout=INFERENCE_ABORT_TIMEOUT)
            for answer in answers:
                if answer.status in (401, 403):
                    log.warning(
                        "%s/abort_request refused the abort (HTTP %d): pass admin_key= or set %s to the server's "
                        "admin key; the runners abort their own requests",
                        answer.engine,
                        answer.status,
                        INFERENCE_ADMIN_KEY_ENV,
                    )
                elif not answer.ok:
                    # Best effort: each runner still aborts its own request when it sees its mark.
                    log.warning(
                        "abort_request to %s failed (%s); the runners abort their own requests",
                        answer.engine,
                        answer.error or answer.status,
                    )

        await asyncio.gather(*(one(e) for e in endpoints))

    async def _set_suspend(
        self, members: list[Object], suspend: bool, *, weight_version: str | None = None
    ) -> list[str]:
        limit = asyncio.Semaphore(MARK_PARALLEL_REQUESTS)
        doing = f"setting spec.suspend={suspend}"

        async def mark(obj: Object) -> str:
            name = name_of(obj)
            # A patch whose answer was lost (reset, 5xx) may have been applied: then the
            # re-read shows the mark, and it is ours; it is never sent a second time.
            maybe_applied = False

            async def write(current: Object | None) -> str:
                nonlocal maybe_applied
                if current is None:
                    return ""  # deleted meanwhile: nothing to abort or resume
                phase = parse_status(current).phase
                if phase.is_terminal:
                    return ""
                if own_suspend(current) == suspend:
                    return name if maybe_applied else ""
                # Conditional on the phase we read (not on the resourceVersion, which the
                # operator's progress writes move all the time): a member that finished
                # since we read it is read again and left alone instead of being marked.
                if (current.get("status") or {}).get("phase"):
                    test: Object = {"op": "test", "path": "/status/phase", "value": phase.value}
                else:  # never reconciled yet: any change at all means read again
                    rv = current["metadata"]["resourceVersion"]
                    test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
                body: list[Object] = [test, {"op": "add", "path": "/spec/suspend", "value": suspend}]
                if weight_version is not None:
                    body.append({"op": "add", "path": "/spec/inference/weightVersion", "value": weight_version})
                try:
                    await self.kube.patch(
                        SWEROLLOUTS, name, body, self.namespace, patch_type="json", field_manager=FIELD_MANAGER
                    )
                except NotFound:
                    return ""
                except KubeError as exc:
                    # 429 was refused before it ran; a reset or a 5xx may have landed.
                    maybe_applied = maybe_applied or (exc.retryable and exc.status != 429)
                    raise
                return name

            async def read() -> Object | None:
                try:
                    return await self.kube.get(SWEROLLOUTS, name, self.namespace)
                except NotFound:
                    return None

            def retrying(exc: BaseException, delay: float) -> None:
                log.info("%s on %s failed (%s); reading it again in %.1f s", doing, name, exc, delay)

            first: Object | None = obj
            async with limit:
                try:
                    return await read_modify_write(
                        first,
                        write=write,
                        read=read,
                        races=MAX_CONFLICT_RETRIES,
                        backoff=MARK_BACKOFF,
                        on_retry=retrying,
                    )
                except RacesLost:
                    raise KubeApiError(f"{name} kept changing while {doing}; try again", retryable=True) from None
                except KubeError as exc:
                    raise kube_error(exc, f"{doing} on {name}") from exc

        names = await asyncio.gather(*(mark(o) for o in members))
        return sorted(n for n in names if n)
