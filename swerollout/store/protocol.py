"""What the operator and the trainer client may rely on from any result store."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from typing import Protocol, runtime_checkable

from swerollout.store.models import ObjectKind, Owner, StoredObject, StoreUsage


@runtime_checkable
class ResultStore(Protocol):
    """Content-addressed object store for rollout results (see :mod:`swerollout.store.models`).

    All methods are coroutines (the operator is asyncio); blocking I/O runs in a
    worker thread. Errors are :class:`swerollout.store.errors.StoreError` subclasses.
    """

    @property
    def url(self) -> str:
        """The URL the store was opened with (credentials never appear in it)."""
        ...

    async def put(
        self, owner: Owner, kind: ObjectKind | str, data: bytes, *, expect_sha256: str | None = None
    ) -> StoredObject:
        """Store ``data`` atomically under the owner's prefix; the same bytes again
        return the same ref and are stored once. With ``expect_sha256`` (what the
        uploader says it sent), bytes that hash differently are refused with
        IntegrityError and nothing is stored."""
        ...

    async def put_stream(
        self,
        owner: Owner,
        kind: ObjectKind | str,
        chunks: AsyncIterable[bytes],
        *,
        expect_sha256: str | None = None,
    ) -> StoredObject:
        """Like ``put`` for a body that arrives in chunks (an HTTP upload): never
        holds more than a few MiB in memory; large bodies wait in a temp file."""
        ...

    async def get(self, ref: str, *, expect_sha256: str | None = None) -> bytes:
        """The object's bytes, verified against the sha256 in its ref (and
        ``expect_sha256`` when given). Raises NotFoundError / IntegrityError."""
        ...

    def get_stream(
        self, ref: str, *, expect_sha256: str | None = None, chunk_size: int = 1 << 20
    ) -> AsyncGenerator[bytes, None]:
        """The object's bytes in chunks, for big objects (``async for chunk in
        store.get_stream(ref)``). The hash can only be checked at the end: the
        iteration then raises IntegrityError and the consumer must discard what it
        received (e.g. abort the HTTP response it was streaming). Stopping early:
        ``await stream.aclose()`` releases the file or connection at once."""
        ...

    async def exists(self, ref: str) -> bool:
        """Whether the object is present (its content is not verified)."""
        ...

    async def delete_owner(self, owner: Owner) -> int:
        """Delete every object of one rollout; returns how many were deleted (0 when
        none are left, so calling it again is harmless)."""
        ...

    async def list_owner(self, owner: Owner) -> list[StoredObject]:
        """The objects of one rollout, sorted by ref."""
        ...

    async def usage(self, owner: Owner | None = None) -> StoreUsage:
        """Objects and bytes held in total, or by one rollout."""
        ...

    async def check(self) -> None:
        """Verify the store is usable (root writable / bucket exists and credentials
        work); raises StoreConfigError or StoreUnavailable naming the problem."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store must not be used afterwards."""
        ...
