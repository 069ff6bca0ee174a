"""Filesystem-only behaviour: permissions, atomic writes, symlinks, crash leftovers."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

import pytest

from swerollout.store import InvalidRefError, Owner, StoreConfigError, StoreError, StoreUsage, open_store
from swerollout.store.filesystem import FilesystemStore

ROLLOUT = Owner(namespace="team-fs", uid="3c1d2e4f-0000-4000-8000-000000000002")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_objects_are_0600_and_their_directories_0700(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    stored = await store.put(ROLLOUT, "trajectory", b"private")
    root = tmp_path / "root"
    obj = root / "team-fs" / ROLLOUT.uid / "trajectory" / stored.sha256

    assert stored.ref == obj.as_uri()
    assert mode(obj) == 0o600
    for directory in (root, root / "team-fs", root / "team-fs" / ROLLOUT.uid, obj.parent):
        assert mode(directory) == 0o700, directory


async def test_a_failed_write_leaves_no_partial_or_temp_file(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    data = b"cannot be renamed into place"
    # Something that is not a file occupies the final name, so the rename fails.
    blocker = tmp_path / "root" / "team-fs" / ROLLOUT.uid / "report" / sha(data)
    blocker.mkdir(parents=True)
    (blocker / "inside").write_bytes(b"x")

    with pytest.raises(StoreError, match="writing file://"):
        await store.put(ROLLOUT, "report", data)
    assert sorted(p.name for p in blocker.parent.iterdir()) == [sha(data)]
    assert await store.usage() == StoreUsage(objects=0, bytes=0)


async def test_leftover_temp_files_are_invisible_and_deleted_with_the_rollout(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    stored = await store.put(ROLLOUT, "snapshot", b"complete")
    # What a crash between create and rename leaves behind.
    leftover = tmp_path / "root" / "team-fs" / ROLLOUT.uid / "snapshot" / f".tmp-{'0' * 16}-deadbeef"
    leftover.write_bytes(b"half of someth")

    assert await store.list_owner(ROLLOUT) == [stored]
    assert await store.usage() == StoreUsage(objects=1, bytes=len(b"complete"))
    assert await store.delete_owner(ROLLOUT) == 1
    assert not (tmp_path / "root" / "team-fs" / ROLLOUT.uid).exists()


async def test_symlinks_out_of_the_root_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"not yours")
    store = open_store((tmp_path / "root").as_uri())
    planted = tmp_path / "root" / "team-fs" / ROLLOUT.uid / "report" / sha(b"not yours")
    planted.parent.mkdir(parents=True)
    planted.symlink_to(secret)
    ref = planted.as_uri()

    with pytest.raises(InvalidRefError, match="outside the store root"):
        await store.get(ref)
    assert await store.usage() == StoreUsage(objects=0, bytes=0)
    await store.delete_owner(ROLLOUT)
    assert secret.read_bytes() == b"not yours"


async def test_a_symlinked_root_is_resolved_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    store = open_store((tmp_path / "link").as_uri())
    stored = await store.put(ROLLOUT, "other", b"through the link")

    assert stored.ref.startswith(real.as_uri() + "/")
    assert await store.get(stored.ref) == b"through the link"


async def test_localhost_refs_are_the_same_object(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    stored = await store.put(ROLLOUT, "report", b"r")
    assert await store.get(stored.ref.replace("file:///", "file://localhost/")) == b"r"


async def test_unsynced_mode_still_round_trips(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri(), fsync=False)
    stored = await store.put(ROLLOUT, "trajectory", b"fast")
    assert await store.get(stored.ref) == b"fast"


def test_root_must_exist_when_creation_is_off(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="does not exist or is not a directory"):
        open_store((tmp_path / "not-mounted").as_uri(), create_root=False)
    assert not (tmp_path / "not-mounted").exists()


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreConfigError):
        open_store((tmp_path / "file").as_uri())


def test_file_urls_must_be_local_and_absolute(tmp_path: Path) -> None:
    for url in ("file://otherhost/data", "file:relative/path", f"{tmp_path.as_uri()}?x=1"):
        with pytest.raises(StoreConfigError, match="file:///absolute/path"):
            open_store(url)
    assert isinstance(open_store(f"file://localhost{tmp_path}"), FilesystemStore)


async def test_two_stores_on_one_root_racing_the_same_object(tmp_path: Path) -> None:
    # Separate instances do not share the in-process single-flight, so their
    # writes really race on the rename; last writer wins with identical bytes.
    url = (tmp_path / "root").as_uri()
    first, second = open_store(url), open_store(url)
    data = os.urandom(512 * 1024)
    results = await asyncio.gather(*(store.put(ROLLOUT, "trajectory", data) for store in [first, second] * 6))

    assert len({r.ref for r in results}) == 1
    assert await first.get(results[0].ref) == data
    kind_dir = tmp_path / "root" / "team-fs" / ROLLOUT.uid / "trajectory"
    assert [p.name for p in kind_dir.iterdir()] == [sha(data)]


async def test_a_symlinked_namespace_directory_is_neither_written_nor_deleted_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ROLLOUT.uid / "report").mkdir(parents=True)
    precious = elsewhere / ROLLOUT.uid / "report" / "precious"
    precious.write_bytes(b"keep me")
    store = open_store((tmp_path / "root").as_uri())
    (tmp_path / "root" / "team-fs").symlink_to(elsewhere)

    with pytest.raises(InvalidRefError, match="outside the store root"):
        await store.put(ROLLOUT, "report", b"r")
    with pytest.raises(InvalidRefError, match="outside the store root"):
        await store.put(Owner(namespace="team-fs", uid="fresh"), "report", b"r")
    assert not (elsewhere / "fresh").exists()  # nothing created through the link
    with pytest.raises(InvalidRefError, match="outside the store root"):
        await store.delete_owner(ROLLOUT)
    assert precious.read_bytes() == b"keep me"
    assert sorted(p.name for p in precious.parent.iterdir()) == ["precious"]
