"""Logic shared by every backend; backends only implement blocking primitives.

Hashing, key layout, ref checks and integrity verification live here once, so a
backend is a thin layer of I/O (the style of httpx: shared logic in one base, the
subclasses only move bytes). The async API runs each primitive in a worker thread
so the operator's event loop never blocks on disk or network.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import tempfile
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, ParamSpec, TypeVar

from swerollout.store.errors import IntegrityError, InvalidRefError, StoreError
from swerollout.store.models import (
    ObjectKey,
    ObjectKind,
    Owner,
    StoredObject,
    StoreUsage,
    parse_kind,
    parse_sha256,
    sha256_hex,
)

_HASH_INLINE_LIMIT = 256 * 1024
"""Bodies larger than this are hashed in a worker thread, not on the event loop."""
SPOOL_IN_MEMORY = 8 * 1024 * 1024
"""``put_stream`` keeps up to this many bytes in memory before spooling to a temp file."""


_P = ParamSpec("_P")
_T = TypeVar("_T")


class BlockingBackendStore(ABC):
    """A :class:`swerollout.store.protocol.ResultStore` built on blocking primitives."""

    def __init__(self, url: str, *, max_workers: int) -> None:
        self._url = url
        self._inflight: dict[str, asyncio.Task[None]] = {}
        # The store's own threads: slow disk or S3 calls must not use up the
        # event loop's default executor that the rest of the operator shares.
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="result-store")
        self._closed = False

    async def _run(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run a blocking call on the store's threads."""
        if self._closed:
            raise StoreError(f"the result store {self._url} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(func, *args, **kwargs))

    @property
    def url(self) -> str:
        return self._url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r})"

    # -- primitives a backend implements (all blocking, all raising StoreError) --

    @abstractmethod
    def _ref(self, key: ObjectKey) -> str:
        """The URI of a key."""

    @abstractmethod
    def _parse_ref(self, ref: str) -> ObjectKey:
        """The key a ref names; InvalidRefError if it is not inside this store."""

    @abstractmethod
    def _write(self, key: ObjectKey, body: BinaryIO, size: int) -> None:
        """Make ``key`` hold the ``size`` bytes of ``body`` (read from its current
        position), atomically: readers see the old object, or none, or all of it."""

    @abstractmethod
    def _stored_intact(self, key: ObjectKey, size: int) -> bool:
        """Whether ``key`` already holds an object that need not be written again."""

    @abstractmethod
    def _read(self, key: ObjectKey) -> bytes:
        """The raw bytes at ``key``; NotFoundError if absent."""

    @abstractmethod
    def _iter_chunks(self, key: ObjectKey, chunk_size: int) -> Generator[bytes, None, None]:
        """The raw bytes at ``key`` in chunks (a generator; closing it releases the
        file/connection); NotFoundError on the first ``next`` if absent."""

    @abstractmethod
    def _exists(self, key: ObjectKey) -> bool: ...

    @abstractmethod
    def _list(self, owner: Owner | None) -> Iterable[tuple[ObjectKey, int]]:
        """Every complete object (and its size) of one owner, or of the whole store."""

    @abstractmethod
    def _delete_owner(self, owner: Owner) -> int: ...

    def _check(self) -> None:  # noqa: B027 (optional hook)
        """Raise if the store is unusable; backends override."""

    def _close(self) -> None:  # noqa: B027 (optional hook)
        """Release resources; backends override."""

    # -- the async API --

    async def put(
        self, owner: Owner, kind: ObjectKind | str, data: bytes, *, expect_sha256: str | None = None
    ) -> StoredObject:
        if not isinstance(owner, Owner):
            raise InvalidRefError(f"owner must be a swerollout.store.Owner, got {type(owner).__name__}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidRefError(f"data must be bytes, got {type(data).__name__}")
        object_kind = parse_kind(kind)
        expected = parse_sha256(expect_sha256, what="expect_sha256") if expect_sha256 is not None else None
        payload = bytes(data)
        if len(payload) > _HASH_INLINE_LIMIT:
            digest = await self._run(sha256_hex, payload)
        else:
            digest = sha256_hex(payload)
        self._check_expected(owner, object_kind, len(payload), digest, expected)
        key = ObjectKey(owner=owner, kind=object_kind, sha256=digest)
        await self._single_flight(key, io.BytesIO(payload), len(payload))
        return StoredObject(ref=self._ref(key), sha256=key.sha256, bytes=len(payload))

    async def put_stream(
        self,
        owner: Owner,
        kind: ObjectKind | str,
        chunks: AsyncIterable[bytes],
        *,
        expect_sha256: str | None = None,
    ) -> StoredObject:
        if not isinstance(owner, Owner):
            raise InvalidRefError(f"owner must be a swerollout.store.Owner, got {type(owner).__name__}")
        object_kind = parse_kind(kind)
        expected = parse_sha256(expect_sha256, what="expect_sha256") if expect_sha256 is not None else None
        # The key is the hash of the whole body, known only at the end, so the
        # body waits in memory (small) or a temp file (large) until then.
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)
        try:
            digest = hashlib.sha256()
            size = 0
            async for chunk in chunks:
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    raise InvalidRefError(f"stream chunks must be bytes, got {type(chunk).__name__}")
                if len(chunk) > _HASH_INLINE_LIMIT:
                    await self._run(digest.update, chunk)
                else:
                    digest.update(chunk)
                size += len(chunk)
                if size > SPOOL_IN_MEMORY:
                    await self._run(spool.write, chunk)
                else:
                    spool.write(chunk)
            self._check_expected(owner, object_kind, size, digest.hexdigest(), expected)
            key = ObjectKey(owner=owner, kind=object_kind, sha256=digest.hexdigest())
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        # From here the write owns the spool and closes it when done, even if this
        # caller is cancelled while the (shielded) write still reads from it.
        await self._single_flight(key, spool, size, close_body=True)  # type: ignore[arg-type]
        return StoredObject(ref=self._ref(key), sha256=key.sha256, bytes=size)

    @staticmethod
    def _check_expected(owner: Owner, kind: ObjectKind, size: int, digest: str, expected: str | None) -> None:
        if expected is not None and digest != expected:
            raise IntegrityError(
                f"upload of a {kind.value} for {owner.prefix} is damaged: its {size} bytes hash to "
                f"{digest}, the uploader sent {expected}; send it again",
                ref="",
                expected=expected,
                actual=digest,
            )

    async def _single_flight(self, key: ObjectKey, body: BinaryIO, size: int, *, close_body: bool = False) -> None:
        """Run one write per key at a time in this process; concurrent puts of the
        same object (a runner retrying while its first upload is still in flight)
        wait for that write instead of racing it with identical bytes."""
        name = str(key)
        loop = asyncio.get_running_loop()
        task = self._inflight.get(name)
        if task is None or task.done() or task.get_loop() is not loop:
            task = loop.create_task(self._run(self._put_blocking, key, body, size, close_body))
            self._inflight[name] = task
            task.add_done_callback(lambda done: self._forget(name, done))
        elif close_body:
            body.close()  # the write already in flight has the same bytes
        # shield: one caller giving up must not cancel the write the others wait for.
        await asyncio.shield(task)

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._inflight.get(name) is task:
            del self._inflight[name]
        if not task.cancelled():
            task.exception()  # retrieved here so a write nobody awaits any more is not logged as lost

    def _put_blocking(self, key: ObjectKey, body: BinaryIO, size: int, close_body: bool) -> None:
        try:
            # A retried upload finds its object already there and writes nothing.
            if not self._stored_intact(key, size):
                self._write(key, body, size)
        finally:
            if close_body:
                body.close()

    async def get(self, ref: str, *, expect_sha256: str | None = None) -> bytes:
        key = self._parse_ref(ref)
        self._check_ref_sha(ref, key, expect_sha256)
        data, actual = await self._run(self._read_and_hash, key)
        self._verify(ref, key, len(data), actual)
        return data

    async def get_stream(
        self, ref: str, *, expect_sha256: str | None = None, chunk_size: int = 1 << 20
    ) -> AsyncGenerator[bytes, None]:
        key = self._parse_ref(ref)
        self._check_ref_sha(ref, key, expect_sha256)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        chunks = self._iter_chunks(key, chunk_size)
        digest = hashlib.sha256()
        size = 0
        try:
            while (chunk := await self._run(next, chunks, None)) is not None:
                digest.update(chunk)
                size += len(chunk)
                yield chunk
        finally:
            await self._run(chunks.close)
        # Only known once everything was read: the consumer must drop what it got.
        self._verify(ref, key, size, digest.hexdigest())

    def _check_ref_sha(self, ref: str, key: ObjectKey, expect_sha256: str | None) -> None:
        if expect_sha256 is None:
            return
        expected = parse_sha256(expect_sha256, what="expect_sha256")
        if expected != key.sha256:
            raise IntegrityError(
                f"ref {ref!r} names content {key.sha256} but the caller expected {expected}; "
                "the ref and the recorded sha256 disagree",
                ref=ref,
                expected=expected,
                actual=key.sha256,
            )

    @staticmethod
    def _verify(ref: str, key: ObjectKey, size: int, actual: str) -> None:
        if actual != key.sha256:
            raise IntegrityError(
                f"object {ref!r} is corrupted: its {size} bytes hash to {actual}, not {key.sha256}; upload it again",
                ref=ref,
                expected=key.sha256,
                actual=actual,
            )

    def _read_and_hash(self, key: ObjectKey) -> tuple[bytes, str]:
        data = self._read(key)
        return data, sha256_hex(data)

    async def exists(self, ref: str) -> bool:
        key = self._parse_ref(ref)
        return await self._run(self._exists, key)

    async def delete_owner(self, owner: Owner) -> int:
        return await self._run(self._delete_owner, owner)

    async def list_owner(self, owner: Owner) -> list[StoredObject]:
        def collect() -> list[StoredObject]:
            return [StoredObject(ref=self._ref(key), sha256=key.sha256, bytes=size) for key, size in self._list(owner)]

        return sorted(await self._run(collect), key=lambda o: o.ref)

    async def usage(self, owner: Owner | None = None) -> StoreUsage:
        def total() -> StoreUsage:
            objects = size_sum = 0
            for _key, size in self._list(owner):
                objects += 1
                size_sum += size
            return StoreUsage(objects=objects, bytes=size_sum)

        return await self._run(total)

    async def check(self) -> None:
        await self._run(self._check)

    async def aclose(self) -> None:
        if self._closed:
            return
        try:
            await self._run(self._close)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False, cancel_futures=True)
