"""The behaviour every result store must have, run against the filesystem and S3 backends."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from pydantic import ValidationError

from swerollout.store import (
    IntegrityError,
    InvalidRefError,
    NotFoundError,
    ObjectKind,
    Owner,
    ResultStore,
    StoreError,
    StoreUsage,
    open_store,
)
from swerollout.store.base import SPOOL_IN_MEMORY
from tests.support.store_support import RawAccess

ROLLOUT = Owner(namespace="team-a", uid="0b6f7c1e-5d1a-4f7e-9a51-2c3d4e5f6a7b")
OTHER_ROLLOUT = Owner(namespace="team-a", uid="77d0e2b4-8c3f-4a6d-b1e2-9f8a7b6c5d4e")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_put_get_round_trip(store: ResultStore, backend: str) -> None:
    data = b"\x00\x01trajectory bytes\xff" * 100
    stored = await store.put(ROLLOUT, ObjectKind.TRAJECTORY, data)

    assert stored.sha256 == sha(data)
    assert stored.bytes == len(data)
    assert urlsplit(stored.ref).scheme == backend
    assert stored.ref.endswith(f"/team-a/{ROLLOUT.uid}/trajectory/{sha(data)}")
    assert await store.get(stored.ref) == data
    assert await store.get(stored.ref, expect_sha256=sha(data)) == data
    assert await store.exists(stored.ref)


async def test_every_kind_is_accepted_and_kinds_are_separate_objects(store: ResultStore) -> None:
    data = b"same bytes, different meaning"
    refs = {kind: (await store.put(ROLLOUT, kind, data)).ref for kind in ObjectKind}
    assert len(set(refs.values())) == len(ObjectKind)
    for kind, ref in refs.items():
        assert f"/{kind.value}/" in ref
        assert await store.get(ref) == data
    # Plain strings work too (the operator gets the kind off the wire).
    assert (await store.put(ROLLOUT, "report", data)).ref == refs[ObjectKind.REPORT]


async def test_unknown_kind_is_refused_naming_the_valid_ones(store: ResultStore) -> None:
    with pytest.raises(
        InvalidRefError, match="unknown object kind 'logs'.*trajectory, snapshot, report, patch, log, other"
    ):
        await store.put(ROLLOUT, "logs", b"x")
    assert await store.usage() == StoreUsage(objects=0, bytes=0)


async def test_retried_put_of_the_same_bytes_is_stored_once(store: ResultStore, raw: RawAccess) -> None:
    data = os.urandom(4096)
    first = await store.put(ROLLOUT, "snapshot", data)
    second = await store.put(ROLLOUT, "snapshot", data)

    assert first == second
    assert await store.usage() == StoreUsage(objects=1, bytes=len(data))
    assert raw.keys() == [f"team-a/{ROLLOUT.uid}/snapshot/{sha(data)}"]


async def test_identical_bytes_of_two_rollouts_are_two_objects(store: ResultStore) -> None:
    data = b"an identical eval report"
    mine = await store.put(ROLLOUT, "report", data)
    theirs = await store.put(OTHER_ROLLOUT, "report", data)

    assert mine.ref != theirs.ref
    assert mine.sha256 == theirs.sha256
    assert await store.delete_owner(ROLLOUT) == 1
    # Deleting one rollout must not take the other's copy with it.
    assert await store.get(theirs.ref) == data
    with pytest.raises(NotFoundError):
        await store.get(mine.ref)


async def test_delete_owner_deletes_exactly_that_rollouts_objects(store: ResultStore) -> None:
    victim = Owner(namespace="team-a", uid="ab")
    # Same uid prefix, same uid in another namespace: both must survive.
    longer_uid = Owner(namespace="team-a", uid="abc")
    other_namespace = Owner(namespace="team-b", uid="ab")
    victim_refs = [(await store.put(victim, kind, f"victim {kind}".encode())).ref for kind in ObjectKind]
    survivors = {
        (await store.put(owner, "trajectory", f"survivor {owner.prefix}".encode())).ref: f"survivor {owner.prefix}"
        for owner in (longer_uid, other_namespace)
    }

    kinds = len(ObjectKind)
    assert await store.usage(victim) == StoreUsage(objects=kinds, bytes=sum(len(f"victim {k}") for k in ObjectKind))
    assert await store.delete_owner(victim) == kinds

    for ref in victim_refs:
        assert not await store.exists(ref)
    for ref, text in survivors.items():
        assert await store.get(ref) == text.encode()
    assert await store.usage(victim) == StoreUsage(objects=0, bytes=0)
    assert (await store.usage()).objects == 2
    # Idempotent: the finalizer may run it again after a restart.
    assert await store.delete_owner(victim) == 0
    assert await store.delete_owner(Owner(namespace="never", uid="seen")) == 0


async def test_list_owner_and_usage(store: ResultStore) -> None:
    small, large = b"s" * 10, b"L" * 1000
    stored = [await store.put(ROLLOUT, "report", small), await store.put(ROLLOUT, "trajectory", large)]
    await store.put(OTHER_ROLLOUT, "other", b"elsewhere")

    assert await store.list_owner(ROLLOUT) == sorted(stored, key=lambda o: o.ref)
    assert await store.usage(ROLLOUT) == StoreUsage(objects=2, bytes=1010)
    assert await store.usage() == StoreUsage(objects=3, bytes=1019)
    assert await store.list_owner(Owner(namespace="team-a", uid="nobody")) == []


async def test_a_corrupted_object_fails_verification(store: ResultStore, raw: RawAccess) -> None:
    data = b"the real trajectory" * 50
    stored = await store.put(ROLLOUT, "trajectory", data)
    raw.write(stored.ref, b"X" + data[1:])  # same size, one byte different

    with pytest.raises(IntegrityError, match="is corrupted") as caught:
        await store.get(stored.ref)
    assert caught.value.expected == sha(data)
    assert caught.value.actual == sha(b"X" + data[1:])
    assert not caught.value.retryable


async def test_re_uploading_repairs_a_corrupted_object(store: ResultStore, raw: RawAccess) -> None:
    data = b"snapshot that gets damaged"
    stored = await store.put(ROLLOUT, "snapshot", data)
    raw.write(stored.ref, b"garbage")

    assert await store.put(ROLLOUT, "snapshot", data) == stored
    assert await store.get(stored.ref) == data


async def test_expected_sha256_must_match_the_ref(store: ResultStore) -> None:
    stored = await store.put(ROLLOUT, "report", b"report")
    with pytest.raises(IntegrityError, match="expected " + sha(b"other")):
        await store.get(stored.ref, expect_sha256=sha(b"other"))
    with pytest.raises(InvalidRefError, match="expect_sha256"):
        await store.get(stored.ref, expect_sha256="not-a-hash")


def _escaping_refs(store_url: str, stored_ref: str) -> list[str]:
    base = stored_ref.rsplit("/", 4)[0]  # the store root / prefix
    digest = stored_ref.rsplit("/", 1)[1]
    scheme = urlsplit(store_url).scheme
    return [
        f"{base}/../../etc/passwd",
        f"{base}/team-a/../../../../etc/passwd",
        f"{base}/team-a/{ROLLOUT.uid}/trajectory/../../../../../etc/passwd",
        f"{base}/../sibling/team-a/{ROLLOUT.uid}/trajectory/{digest}",
        f"{base}/%2e%2e/%2e%2e/team-a/{ROLLOUT.uid}/trajectory/{digest}",
        f"{base}/team-a/..%2f..%2f/trajectory/{digest}",
        f"{base}/team-a/{ROLLOUT.uid}/trajectory/{digest}/../{digest}",
        f"{base}-evil/team-a/{ROLLOUT.uid}/trajectory/{digest}",  # a sibling whose name shares the prefix
        f"{base}/team-a/{ROLLOUT.uid}/passwd/{digest}",
        f"{base}/team-a/{ROLLOUT.uid}/trajectory/{digest.upper()}",
        f"{base}//team-a/{ROLLOUT.uid}/trajectory/{digest}",
        "file:///etc/passwd" if scheme == "s3" else f"s3://bucket/team-a/{ROLLOUT.uid}/trajectory/{digest}",
        "https://example.com/x",
        "/etc/passwd",
        "",
    ]


async def test_refs_outside_the_store_are_refused(store: ResultStore, store_url: str) -> None:
    stored = await store.put(ROLLOUT, "trajectory", b"inside")
    for ref in _escaping_refs(store_url, stored.ref):
        with pytest.raises(InvalidRefError):
            await store.get(ref)
        with pytest.raises(InvalidRefError):
            await store.exists(ref)
    assert await store.get(stored.ref) == b"inside"


def test_owner_names_cannot_carry_paths() -> None:
    for namespace, uid in [
        ("..", "x"),
        ("team-a", ".."),
        ("team-a/b", "x"),
        ("team-a", "a/b"),
        ("Team", "x"),
        ("team-a", ""),
        ("", "x"),
        ("team-a", "a%2fb"),
        ("team-a", "a.b"),
    ]:
        with pytest.raises(ValidationError):
            Owner(namespace=namespace, uid=uid)


async def test_missing_object_is_not_found(store: ResultStore) -> None:
    stored = await store.put(ROLLOUT, "report", b"present")
    missing = stored.ref.replace(stored.sha256, sha(b"absent"))

    assert not await store.exists(missing)
    with pytest.raises(NotFoundError, match="does not exist"):
        await store.get(missing)
    assert not NotFoundError("x").retryable


async def test_concurrent_puts_of_the_same_bytes_are_safe(store: ResultStore, raw: RawAccess) -> None:
    data = os.urandom(256 * 1024)
    results = await asyncio.gather(*(store.put(ROLLOUT, "trajectory", data) for _ in range(12)))

    assert len({r.ref for r in results}) == 1
    assert await store.get(results[0].ref) == data
    assert await store.usage() == StoreUsage(objects=1, bytes=len(data))
    # No temp file or stray part survives the race.
    assert raw.keys() == [f"team-a/{ROLLOUT.uid}/trajectory/{sha(data)}"]


async def test_concurrent_puts_of_different_bytes_all_land(store: ResultStore) -> None:
    blobs = [os.urandom(1000 + i) for i in range(10)]
    results = await asyncio.gather(*(store.put(ROLLOUT, "other", blob) for blob in blobs))
    for blob, result in zip(blobs, results, strict=True):
        assert await store.get(result.ref) == blob
    assert await store.usage(ROLLOUT) == StoreUsage(objects=10, bytes=sum(map(len, blobs)))


async def test_a_large_object_round_trips(store: ResultStore, raw: RawAccess) -> None:
    # Above S3's 5 MiB part size: the S3 fixture uploads it in two parts.
    data = os.urandom(6 * 1024 * 1024 + 123)
    stored = await store.put(ROLLOUT, "snapshot", data)

    assert stored.bytes == len(data)
    assert await store.get(stored.ref) == data
    assert raw.read(stored.ref) == data
    assert await store.put(ROLLOUT, "snapshot", data) == stored
    assert await store.usage() == StoreUsage(objects=1, bytes=len(data))


async def test_empty_object(store: ResultStore) -> None:
    stored = await store.put(ROLLOUT, "other", b"")
    assert stored.sha256 == sha(b"")
    assert stored.bytes == 0
    assert await store.get(stored.ref) == b""


async def test_check_passes_on_a_usable_store(store: ResultStore) -> None:
    await store.check()
    assert await store.usage() == StoreUsage(objects=0, bytes=0)  # check leaves nothing behind


async def test_an_upload_that_does_not_match_the_senders_hash_is_refused(store: ResultStore) -> None:
    sent = b"what the runner sent"
    received = b"what arrived, damaged"
    with pytest.raises(IntegrityError, match="the uploader sent " + sha(sent)) as caught:
        await store.put(ROLLOUT, "trajectory", received, expect_sha256=sha(sent))
    assert caught.value.actual == sha(received)
    assert await store.usage() == StoreUsage(objects=0, bytes=0)

    stored = await store.put(ROLLOUT, "trajectory", sent, expect_sha256=sha(sent))
    assert stored.sha256 == sha(sent)
    with pytest.raises(InvalidRefError, match="expect_sha256"):
        await store.put(ROLLOUT, "trajectory", sent, expect_sha256=sha(sent).upper())


async def test_a_cancelled_put_does_not_abort_the_same_write_others_wait_for(store: ResultStore) -> None:
    data = os.urandom(2 * 1024 * 1024)
    tasks = [asyncio.create_task(store.put(ROLLOUT, "snapshot", data)) for _ in range(3)]
    await asyncio.sleep(0)  # let them all join the one write
    tasks[0].cancel()
    results = await asyncio.gather(*tasks[1:])

    assert tasks[0].cancelled()
    assert results[0] == results[1]
    assert await store.get(results[0].ref) == data


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


async def test_a_streamed_upload_is_the_same_object_as_a_put(store: ResultStore) -> None:
    data = os.urandom(300_000)
    streamed = await store.put_stream(ROLLOUT, "trajectory", _chunks(data, 65536), expect_sha256=sha(data))
    assert streamed == await store.put(ROLLOUT, "trajectory", data)
    assert await store.get(streamed.ref) == data
    assert await store.usage() == StoreUsage(objects=1, bytes=len(data))


async def test_a_streamed_upload_larger_than_memory_spooling(store: ResultStore) -> None:
    # Past the in-memory spool (8 MiB): waits in a temp file, then goes to S3 in parts.
    data = os.urandom(SPOOL_IN_MEMORY + 1024 * 1024 + 5)
    streamed = await store.put_stream(ROLLOUT, "snapshot", _chunks(data, 1024 * 1024))
    assert streamed.sha256 == sha(data)
    assert streamed.bytes == len(data)
    assert await store.get(streamed.ref) == data


async def test_a_damaged_or_broken_stream_stores_nothing(store: ResultStore) -> None:
    data = b"x" * 100_000
    with pytest.raises(IntegrityError, match="the uploader sent"):
        await store.put_stream(ROLLOUT, "report", _chunks(data, 4096), expect_sha256=sha(data[:-1]))

    async def breaks_midway() -> AsyncIterator[bytes]:
        yield b"first part"
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await store.put_stream(ROLLOUT, "report", breaks_midway())
    assert await store.usage() == StoreUsage(objects=0, bytes=0)


async def test_get_stream_reads_big_objects_in_chunks(store: ResultStore) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    stored = await store.put(ROLLOUT, "snapshot", data)
    chunks = [chunk async for chunk in store.get_stream(stored.ref, expect_sha256=stored.sha256, chunk_size=1 << 20)]

    assert b"".join(chunks) == data
    assert len(chunks) >= 4
    assert all(len(chunk) <= 1 << 20 for chunk in chunks)


async def test_get_stream_reports_corruption_after_the_last_chunk(store: ResultStore, raw: RawAccess) -> None:
    data = os.urandom(200_000)
    stored = await store.put(ROLLOUT, "trajectory", data)
    raw.write(stored.ref, data[:-1] + bytes([data[-1] ^ 1]))
    received = bytearray()

    with pytest.raises(IntegrityError, match="is corrupted"):
        async for chunk in store.get_stream(stored.ref, chunk_size=65536):
            received += chunk
    assert len(received) == len(data)  # everything arrived before the verdict


async def test_get_stream_refuses_before_reading(store: ResultStore) -> None:
    stored = await store.put(ROLLOUT, "report", b"r")
    with pytest.raises(NotFoundError):
        async for _ in store.get_stream(stored.ref.replace(stored.sha256, sha(b"gone"))):
            pass
    with pytest.raises(IntegrityError, match="the caller expected"):
        async for _ in store.get_stream(stored.ref, expect_sha256=sha(b"other")):
            pass
    with pytest.raises(InvalidRefError):
        async for _ in store.get_stream(stored.ref.rsplit("/", 4)[0] + "/../x/y/z/w"):
            pass


async def test_stopping_a_stream_early_leaves_the_store_usable(store: ResultStore) -> None:
    data = os.urandom(1024 * 1024)
    stored = await store.put(ROLLOUT, "other", data)
    stream = store.get_stream(stored.ref, chunk_size=4096)
    first = await anext(stream)
    await stream.aclose()

    assert first == data[:4096]
    assert await store.get(stored.ref) == data
    assert await store.delete_owner(ROLLOUT) == 1


async def test_a_closed_store_says_so(store_url: str, store_options: dict[str, object]) -> None:
    store = open_store(store_url, **store_options)
    stored = await store.put(ROLLOUT, "report", b"r")
    await store.aclose()
    await store.aclose()  # closing twice is harmless
    with pytest.raises(StoreError, match="is closed"):
        await store.get(stored.ref)
