"""What every part of the trainer client shares: the cluster it talks to, the reads, and
the conditional writes.

`ClientCore` holds the client's state (the Kubernetes client, the namespace, the batch
object writer, the result-store and watch handles) and the reads that submit, suspend and
fetch all need: the pre-flight check, listing and reading rollouts, the batch objects, and
following a batch. The operations themselves live in submit.py, suspend.py and fetch.py;
aclient.AsyncRolloutClient is their facade.

Every conditional write of the client (a batch's create-or-patch here, suspend.py's marks
by name) goes through one read-modify-write loop, `read_modify_write`, in the spirit of
client-go's RetryOnConflict:

    result = await read_modify_write(
        obj,                        # what the caller read
        write=decide_and_write,     # decides from an object and writes conditionally on it
        read=read_again,            # the object again, after a race or a lost answer
        races=5,
        backoff=WRITE_BACKOFF,
    )

``write(obj)`` looks at what was read, returns at once when nothing is left to do, and
otherwise sends one write conditional on what it read (a resourceVersion, or a JSON
patch ``test``). The loop decides what happens after a failure:

- a lost race (``raced``, by default a 409 Conflict or a 422 from a failed ``test``):
  ``write`` decides again on a fresh read, at most ``races`` times in all (then
  :class:`RacesLost`);
- a failure that says retrying may help (a reset, a timeout, 429, 5xx): the write may
  have landed, so it is never sent again blind: the loop waits out ``backoff`` and
  ``write`` decides again on a fresh read, which shows a landed write as done;
- anything else, and a spent ``backoff``, goes up as raised.

The waits are those of ``Backoff.retrying`` (the project's one retry loop); a failed
re-read is retried by the same schedule.

A batch write (`BatchWriter.set`) suspends or resumes a whole batch with one write,
whatever its size; a write whose answer was lost is read back before anything is sent
again, so a retry never re-applies an old intent over a newer one (another trainer's
resume, say).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

from swerollout.api.v1alpha1 import (
    API_VERSION,
    BATCH_KIND,
    BATCH_PLURAL,
    GROUP,
    LABEL_BATCH,
    PLURAL,
    VERSION,
    SWERolloutBatchSpec,
)
from swerollout.backoff import Backoff
from swerollout.client.errors import (
    ClientConfigError,
    ClientError,
    CrdNotInstalled,
    KubeApiError,
    NamespaceNotFound,
    RolloutNotFound,
    UnknownBatch,
)
from swerollout.client.records import parse_status
from swerollout.client.watch import Listed, SharedWatch, list_and_watch
from swerollout.kube import (
    NAMESPACES,
    SWEROLLOUTBATCHES,
    SWEROLLOUTS,
    AsyncKubeClient,
    ConfigError,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    aretry,
)
from swerollout.kube.retry import kube_retry_after
from swerollout.store.protocol import ResultStore

FIELD_MANAGER = "swerollout-client"
Object = dict[str, Any]
# One logger for the whole client (its name is the one trainers configure).
log = logging.getLogger("swerollout.client.aclient")

# Parallel requests for submit/abort/resume/results (the API server throttles beyond this).
PARALLEL_REQUESTS = 16
# Parallel abort/resume marks and deletes: small requests, and a batch abort should land in seconds.
MARK_PARALLEL_REQUESTS = 64
# The inference servers' admin key for abort(batch), when the caller passes none.
INFERENCE_ADMIN_KEY_ENV = "SWEROLLOUT_INFERENCE_ADMIN_KEY"


# -- conditional writes ------------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R")


class RacesLost(KubeError):
    """Other writers changed the object between our read and our write, time after time."""

    retryable = True


def lost_race(exc: KubeError) -> bool:
    """409 (someone wrote since our read) or 422 (a JSON patch `test` on what we read failed)."""
    return isinstance(exc, (Conflict, Invalid))


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and exc.retryable and not isinstance(exc, RacesLost)


async def read_modify_write(
    current: T,
    *,
    write: Callable[[T], Awaitable[R]],
    read: Callable[[], Awaitable[T]],
    races: int,
    backoff: Backoff,
    raced: Callable[[KubeError], bool] = lost_race,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> R:
    """Run ``write`` on ``current``, then on fresh reads after races and lost answers (see the module)."""
    if races < 1:
        raise ValueError(f"races must be at least 1, got {races}")
    lost = 0
    reread = False
    async for attempt in backoff.retrying(retryable=_transient, retry_after=kube_retry_after, on_retry=on_retry):
        with attempt:
            while True:
                if reread:
                    current = await read()
                reread = True
                try:
                    return await write(current)
                except KubeError as exc:
                    if exc.retryable or not raced(exc):
                        raise
                    lost += 1
                    if lost >= races:
                        raise RacesLost(f"the object kept changing under {lost} conditional writes: {exc}") from exc
    raise AssertionError("unreachable: the retry loop returns or raises")


# -- the batch objects -------------------------------------------------------------------

WRITE_BACKOFF = Backoff(first_seconds=0.2, max_seconds=5.0, budget_seconds=30.0)
"""Transient failures (reset, 429, 5xx) of one batch write: retried for 30 s."""
MAX_RACES = 5
"""Someone else wrote the batch between our read and our write this many times: give up."""


def _spec(obj: dict[str, Any] | None) -> SWERolloutBatchSpec | None:
    if obj is None:
        return None
    try:
        return SWERolloutBatchSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        return SWERolloutBatchSpec()


class BatchWriter:
    """Reads and writes the SWERolloutBatch objects of one namespace for the client."""

    def __init__(self, kube: AsyncKubeClient, namespace: str, field_manager: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.field_manager = field_manager

    def _forbidden(self, exc: Forbidden, doing: str) -> ClientConfigError:
        return ClientConfigError(
            f"{doing}: {exc}. The trainer's identity needs get, create and patch on "
            f"{BATCH_PLURAL}.{GROUP} in namespace {self.namespace} (see docs/client.md, Permissions)"
        )

    async def get(self, name: str) -> SWERolloutBatchSpec | None:
        """The batch's spec; None when it has no object."""
        return _spec(await self._read(name))

    async def get_if_allowed(self, name: str) -> SWERolloutBatchSpec | None:
        """As :meth:`get`, but None (with a warning) for an identity that may not read
        batches: it cannot have suspended one either, and by-name work must go on."""
        try:
            return await self.get(name)
        except ClientConfigError as exc:
            log.warning("%s; treating batch %s as not suspended", exc, name)
            return None

    async def all_if_allowed(self) -> dict[str, SWERolloutBatchSpec]:
        """Every batch object's spec by name (one LIST); empty, with a warning, for an
        identity that may not list them, and empty where the CRD is not installed."""
        try:
            items = await aretry(lambda: self.kube.list(SWEROLLOUTBATCHES, self.namespace), policy=WRITE_BACKOFF)
        except NotFound:
            return {}  # the API server does not serve SWERolloutBatch (an install from before it)
        except Forbidden as exc:
            log.warning(
                "%s; showing only the rollouts' own spec.suspend", self._forbidden(exc, "listing SWERolloutBatches")
            )
            return {}
        except KubeError as exc:
            raise KubeApiError(
                f"listing SWERolloutBatches in {self.namespace}: {exc}", retryable=exc.retryable
            ) from exc
        specs = {str(o["metadata"]["name"]): _spec(o) for o in items.get("items") or []}
        return {name: spec for name, spec in specs.items() if spec is not None}

    async def delete(self, name: str) -> bool:
        """Delete the batch object; False when there was none (or the CRD is not installed)."""
        try:
            await aretry(lambda: self.kube.delete(SWEROLLOUTBATCHES, name, self.namespace), policy=WRITE_BACKOFF)
        except NotFound:
            return False
        except Forbidden as exc:
            raise ClientConfigError(
                f"deleting SWERolloutBatch {name}: {exc}. The trainer's identity needs delete on "
                f"{BATCH_PLURAL}.{GROUP} in namespace {self.namespace} (see docs/client.md, Permissions)"
            ) from exc
        except KubeError as exc:
            raise KubeApiError(f"deleting SWERolloutBatch {name}: {exc}", retryable=exc.retryable) from exc
        return True

    async def _read(self, name: str) -> dict[str, Any] | None:
        try:
            return await aretry(lambda: self.kube.get(SWEROLLOUTBATCHES, name, self.namespace), policy=WRITE_BACKOFF)
        except NotFound:
            return None
        except Forbidden as exc:
            raise self._forbidden(exc, f"reading SWERolloutBatch {name}") from exc
        except KubeError as exc:
            raise KubeApiError(f"reading SWERolloutBatch {name}: {exc}", retryable=exc.retryable) from exc

    async def set(self, name: str, *, suspend: bool, weight_version: str | None = None) -> SWERolloutBatchSpec | None:
        """Make the batch read ``suspend`` (and ``weight_version`` when given), creating its
        object if needed. Returns the spec it had before (None: there was no object)."""
        doing = f"setting spec.suspend={str(suspend).lower()} on SWERolloutBatch {name}"
        wanted: dict[str, Any] = {"suspend": suspend}
        if weight_version is not None:
            wanted["weightVersion"] = weight_version
        obj = await self._read(name)
        before = _spec(obj)
        refused: tuple[str | None, Invalid] | None = None
        """The resourceVersion a write was refused at with a 422, and the refusal."""

        async def write(current: dict[str, Any] | None) -> None:
            nonlocal refused
            spec = _spec(current)
            if spec is not None and all(spec.to_wire().get(k) == v for k, v in wanted.items()):
                return
            rv = current["metadata"]["resourceVersion"] if current is not None else None
            if refused is not None and refused[0] == rv:
                # Nobody wrote the object since it refused this very write: the 422 was no
                # failed `test` of ours but a refusal of the write itself.
                raise KubeApiError(f"{doing}: {refused[1]}") from refused[1]
            try:
                if current is None:
                    body = {"apiVersion": API_VERSION, "kind": BATCH_KIND, "metadata": {"name": name}, "spec": wanted}
                    await self.kube.create(SWEROLLOUTBATCHES, body, self.namespace, field_manager=self.field_manager)
                else:
                    patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]
                    patch += [{"op": "add", "path": f"/spec/{k}", "value": v} for k, v in wanted.items()]
                    await self.kube.patch(
                        SWEROLLOUTBATCHES,
                        name,
                        patch,
                        self.namespace,
                        patch_type="json",
                        field_manager=self.field_manager,
                    )
            except Invalid as exc:
                refused = (rv, exc)  # a failed `test` (someone wrote it since we read it) is a 422 too
                raise
            except Forbidden as exc:
                raise self._forbidden(exc, doing) from exc

        def retrying(exc: BaseException, delay: float) -> None:
            # The write may have landed: the read that follows shows it, and it is not sent again.
            log.info("%s failed (%s); reading it again in %.1f s", doing, exc, delay)

        try:
            await read_modify_write(
                obj,
                write=write,
                read=lambda: self._read(name),
                races=MAX_RACES,
                backoff=WRITE_BACKOFF,
                # Someone else created, deleted or wrote it since we read it: read again.
                raced=lambda exc: isinstance(exc, (Conflict, Invalid, NotFound)),
                on_retry=retrying,
            )
        except RacesLost:
            raise KubeApiError(
                f"SWERolloutBatch {name} kept changing while {doing}; try again", retryable=True
            ) from None
        except KubeError as exc:
            raise KubeApiError(f"{doing}: {exc}", retryable=exc.retryable) from exc
        return before


# -- the shared reads --------------------------------------------------------------------


def kube_error(exc: KubeError, doing: str) -> ClientError:
    if isinstance(exc, ConfigError):
        return ClientConfigError(f"{doing}: {exc}")
    return KubeApiError(f"{doing}: {exc}", retryable=exc.retryable)


def name_of(obj: Object) -> str:
    return str(obj["metadata"]["name"])


def unfinished(obj: Object) -> bool:
    return not parse_status(obj).phase.is_terminal


def own_suspend(obj: Object) -> bool:
    """The rollout's own spec.suspend (its batch may suspend it as well)."""
    return bool((obj.get("spec") or {}).get("suspend"))


class ClientCore:
    """The state of one client of one namespace, and the reads its operations share."""

    def __init__(
        self,
        kube: AsyncKubeClient,
        namespace: str | None = None,
        *,
        store_url: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        results_url: str | None = None,
        results_token: str | None = None,
        inference_admin_key: str | None = None,
        owns_kube: bool = False,
    ) -> None:
        self.kube = kube
        self.namespace = namespace or kube.config.namespace
        self.store_url = store_url
        self._store_options = dict(store_options or {})
        self.results_url = results_url.rstrip("/") if results_url else None
        self._results_token = results_token
        self._inference_admin_key = inference_admin_key or os.environ.get(INFERENCE_ADMIN_KEY_ENV) or None
        self._owns_kube = owns_kube
        self._store: ResultStore | None = None
        self._http: httpx.AsyncClient | None = None
        self._checked = False
        self._batch_crd = False
        """Whether the API server serves SWERolloutBatch (else batch abort/resume marks each member)."""
        self._batches = BatchWriter(kube, self.namespace, FIELD_MANAGER)
        self._batches_checked: set[str] = set()
        """Batches whose object submit found fit for new members (one read per batch)."""
        self._watch: SharedWatch | None = None

    async def check_cluster(self) -> None:
        """Fail with a clear error when the CRD is missing or the namespace does not exist."""
        if self._checked:
            return
        try:
            group = await self.kube.request("GET", f"/apis/{GROUP}/{VERSION}")
        except NotFound:
            raise CrdNotInstalled(
                f"the API server does not serve {PLURAL}.{GROUP}/{VERSION}: install the CRD "
                "(kubectl apply --server-side -f crds/, or helm install swerollout helm/swerollout)"
            ) from None
        except KubeError as exc:
            raise kube_error(exc, "checking that the SWERollout CRD is installed") from exc
        if not any(r.get("name") == PLURAL for r in group.get("resources") or []):
            raise CrdNotInstalled(f"{GROUP}/{VERSION} does not list {PLURAL}: install the current CRD from crds/")
        self._batch_crd = any(r.get("name") == BATCH_PLURAL for r in group.get("resources") or [])
        try:
            await self.kube.get(NAMESPACES, self.namespace)
        except NotFound:
            raise NamespaceNotFound(
                f"namespace {self.namespace!r} does not exist: pass the right one (--namespace / namespace=) "
                "or create it (kubectl create namespace ...)"
            ) from None
        except Forbidden:
            pass  # callers limited to their namespace may not read Namespace objects
        except KubeError as exc:
            raise kube_error(exc, f"checking namespace {self.namespace!r}") from exc
        self._checked = True

    async def list_rollouts(self, batch: str | None = None) -> list[Object]:
        """The SWERollouts of the namespace (of one batch when given), sorted by name."""
        await self.check_cluster()
        selector = f"{LABEL_BATCH}={batch}" if batch else None
        try:
            # Reads are idempotent: ride out a reset, 429 or 5xx as the marks do.
            items = await aretry(lambda: self._listed(selector))
        except KubeError as exc:
            raise kube_error(exc, f"listing SWERollouts in {self.namespace}") from exc
        return sorted(items, key=lambda o: str(o["metadata"]["name"]))

    async def _listed(self, selector: str | None) -> list[Object]:
        return [o async for o in self.kube.iter_items(SWEROLLOUTS, self.namespace, label_selector=selector)]

    async def get_rollout(self, name: str) -> Object:
        await self.check_cluster()
        try:
            return await aretry(lambda: self.kube.get(SWEROLLOUTS, name, self.namespace))
        except NotFound:
            raise RolloutNotFound(
                f"no SWERollout named {name!r} in namespace {self.namespace!r}; `swerollout list` shows what exists"
            ) from None
        except KubeError as exc:
            raise kube_error(exc, f"reading SWERollout {name}") from exc

    async def members(self, batch: str) -> list[Object]:
        """The batch's SWERollouts; UnknownBatch when there are none."""
        items = await self.list_rollouts(batch)
        if not items:
            raise self._unknown_batch(batch)
        return items

    async def batch_specs(self) -> dict[str, SWERolloutBatchSpec]:
        """The namespace's SWERolloutBatch specs by name (one LIST): with
        :func:`~swerollout.client.progress.member_state` they tell who is suspended. Empty
        where the CRD is not installed or the identity may not list them (warned)."""
        await self.check_cluster()
        return await self._batches.all_if_allowed() if self._batch_crd else {}

    async def batch_spec(self, batch: str) -> SWERolloutBatchSpec | None:
        """The spec of the batch's SWERolloutBatch; None when it has none (or the CRD is
        not installed, or the identity may not read it: warned)."""
        await self.check_cluster()
        return await self._batches.get_if_allowed(batch) if self._batch_crd else None

    def _unknown_batch(self, batch: str) -> UnknownBatch:
        return UnknownBatch(
            f"batch {batch!r} has no SWERollouts in namespace {self.namespace!r} (label {LABEL_BATCH}={batch}); "
            "check the batch name and --namespace, `swerollout list` shows the batches that exist"
        )

    async def _has_members(self, batch: str) -> bool:
        """Whether any SWERollout carries the batch's label: one small read (limit=1)."""
        try:
            page = await aretry(
                lambda: self.kube.list(SWEROLLOUTS, self.namespace, label_selector=f"{LABEL_BATCH}={batch}", limit=1)
            )
        except KubeError as exc:
            raise kube_error(exc, f"listing the members of batch {batch}") from exc
        return bool(page.get("items"))

    async def _observe(self, batch: str) -> AsyncGenerator[list[Object], None]:
        """The batch's members now, then again after every change (see watch.list_and_watch)."""
        await self.check_cluster()
        items: dict[str, Object] = {}
        try:
            async with aclosing(list_and_watch(self.kube, self.namespace, f"{LABEL_BATCH}={batch}")) as changes:
                async for change in changes:
                    if isinstance(change, Listed):
                        items = dict(change.items)
                        if not items:
                            raise self._unknown_batch(batch)
                    elif change.deleted:
                        items.pop(change.name, None)
                        if not items:
                            raise UnknownBatch(f"every member of batch {batch!r} was deleted while following it")
                    else:
                        items[change.name] = change.obj
                    yield list(items.values())
        except KubeError as exc:
            raise kube_error(exc, f"watching batch {batch}") from exc
