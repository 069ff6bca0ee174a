"""The client's reads and writes of SWERolloutBatch objects: suspend or resume a whole
batch with one write (create-or-patch), whatever the batch's size; read them so users see
who suspends a member; delete one with its batch.

A write is conditional on the resourceVersion it read, and a write whose answer was
lost is read back before anything is sent again: a retry never re-applies an old
intent over a newer one (another trainer's resume, say).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from swerollout.api.v1alpha1 import API_VERSION, BATCH_KIND, BATCH_PLURAL, GROUP, SWERolloutBatchSpec
from swerollout.backoff import Backoff
from swerollout.client.errors import ClientConfigError, KubeApiError
from swerollout.kube import (
    SWEROLLOUTBATCHES,
    AsyncKubeClient,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    aretry,
)
from swerollout.kube.conditional import RacesLost, read_modify_write

log = logging.getLogger(__name__)

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
