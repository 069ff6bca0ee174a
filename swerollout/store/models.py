"""Boundary models of the result store and the one place that knows the key layout.

Every object lives at ``<namespace>/<rollout-uid>/<kind>/<sha256>`` below the store
root (filesystem) or prefix (S3). The layout gives two properties the operator
relies on:

- content addressing *within* a rollout: a retried upload of the same bytes lands
  on the same key, so it is stored once;
- ownership by prefix: deleting a rollout removes exactly its prefix, and two
  rollouts that upload identical bytes each keep their own copy (no reference
  counting, no shared objects to leak or delete too early).

The patterns below are strict on purpose: a key that parses can never contain
``..``, a slash inside a component or a percent escape, which is what keeps refs
from escaping the store root.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from swerollout.store.errors import InvalidRefError

NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
"""A Kubernetes namespace name (DNS-1123 label)."""
UID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"
"""A rollout uid: Kubernetes uids are UUIDs; dots are excluded so ``..`` cannot appear."""
SHA256_PATTERN = r"^[0-9a-f]{64}$"

_SHA256 = re.compile(SHA256_PATTERN)


class ObjectKind(StrEnum):
    """What an object is; the third component of its key."""

    TRAJECTORY = "trajectory"
    """The encoded :class:`swerollout.wire.trajectory.Trajectory` of a rollout."""
    SNAPSHOT = "snapshot"
    """A partial trajectory saved at an abort, for resuming."""
    REPORT = "report"
    """An evaluation report (test output, grading)."""
    PATCH = "patch"
    """The working-tree diff a run submitted (or the one captured at an abort, for replay)."""
    LOG = "log"
    """A runner container's own log (bounded by MAX_LOG_BYTES), kept when its pod is deleted."""
    OTHER = "other"
    """Anything else a runner attaches."""
    CHECKPOINT = "checkpoint"
    """A segment of a running rollout's per-turn checkpoint chain (agent_runner.pod.checkpoint)."""


class Owner(BaseModel):
    """The rollout an object belongs to; its objects share the prefix ``<namespace>/<uid>/``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    """Namespace of the SWERollout."""
    uid: str = Field(pattern=UID_PATTERN)
    """``metadata.uid`` of the SWERollout (not its name: a re-created rollout with the
    same name must not see or delete the old one's objects)."""

    @property
    def prefix(self) -> str:
        """``<namespace>/<uid>/`` (the trailing slash keeps uid ``ab`` from matching ``abc``)."""
        return f"{self.namespace}/{self.uid}/"


class StoredObject(BaseModel):
    """What ``put`` returns and what a SWERollout's status records."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref: str
    """URI of the object (``file:///...`` or ``s3://bucket/key``); pass it to ``get``."""
    sha256: str = Field(pattern=SHA256_PATTERN)
    """Hex sha256 of the bytes; ``get`` verifies it."""
    bytes: int = Field(ge=0)
    """Size in bytes."""


class StoreUsage(BaseModel):
    """How much the store (or one owner's prefix) holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objects: int = Field(ge=0)
    bytes: int = Field(ge=0)


class ObjectKey(BaseModel):
    """A parsed key, relative to the store root/prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: Owner
    kind: ObjectKind
    sha256: str = Field(pattern=SHA256_PATTERN)

    def __str__(self) -> str:
        return f"{self.owner.prefix}{self.kind.value}/{self.sha256}"

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return (self.owner.namespace, self.owner.uid, self.kind.value, self.sha256)

    @classmethod
    def parse(cls, key: str, *, ref: str) -> ObjectKey:
        """Parse ``<namespace>/<uid>/<kind>/<sha256>``; anything else is an :class:`InvalidRefError`."""
        parts = key.split("/")
        if len(parts) != 4:
            raise InvalidRefError(
                f"ref {ref!r} does not name a stored object: expected <root>/<namespace>/<uid>/<kind>/<sha256>"
            )
        namespace, uid, kind, sha = parts
        try:
            owner = Owner(namespace=namespace, uid=uid)
        except ValueError as exc:
            raise InvalidRefError(
                f"ref {ref!r} has an invalid namespace or rollout uid: {namespace!r}/{uid!r}"
            ) from exc
        return cls(owner=owner, kind=parse_kind(kind, ref=ref), sha256=parse_sha256(sha, what=f"ref {ref!r}"))


def sibling_ref(ref: str, sha256: str) -> str:
    """The ref of another object of the same rollout and kind as ``ref`` (a checkpoint
    segment names its parent by sha256 only): the key's last component replaced."""
    base, _, last = ref.rpartition("/")
    if not base or not _SHA256.fullmatch(last):
        raise InvalidRefError(f"ref {ref!r} does not end in a sha256")
    return f"{base}/{parse_sha256(sha256, what='a sibling object')}"


def parse_kind(kind: str | ObjectKind, *, ref: str | None = None) -> ObjectKind:
    try:
        return ObjectKind(kind)
    except ValueError:
        valid = ", ".join(k.value for k in ObjectKind)
        where = f"ref {ref!r}: " if ref else ""
        raise InvalidRefError(f"{where}unknown object kind {kind!r}; valid kinds: {valid}") from None


def parse_sha256(value: str, *, what: str) -> str:
    if not _SHA256.fullmatch(value):
        raise InvalidRefError(f"{what}: {value!r} is not a lowercase hex sha256 (64 characters)")
    return value


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
