"""Result store on a local filesystem (by default a PersistentVolumeClaim mounted in the operator).

Layout: ``<root>/<namespace>/<uid>/<kind>/<sha256>``, directories 0700, files 0600.
A write goes to a hidden temp file in the object's own directory, is fsynced and
then renamed over the final name, and the directory is fsynced: a reader sees no
object or a complete one, and a crash leaves at most a ``.tmp-*`` file that no
listing counts and ``delete_owner`` removes with the rollout.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerollout.store.base import BlockingBackendStore
from swerollout.store.errors import (
    InvalidRefError,
    NotFoundError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
)
from swerollout.store.models import ObjectKey, ObjectKind, Owner

DIR_MODE = 0o700
FILE_MODE = 0o600
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 4 << 20
_KIND_NAMES = frozenset(kind.value for kind in ObjectKind)

# Failures that may clear up by themselves (disk freed, NFS back, lock released).
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EIO,
        errno.EAGAIN,
        errno.EINTR,
        errno.ETIMEDOUT,
        errno.EBUSY,
        errno.ESTALE,
        errno.ENOTEMPTY,
    }
)


class FilesystemOptions(BaseModel):
    """Options of ``open_store("file:///...", **options)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fsync: bool = True
    """fsync each object and its directory before put returns. Turn off only where
    durability does not matter (tests on tmpfs, benchmarks)."""
    max_workers: int = Field(default=8, ge=1)
    """Threads doing this store's disk I/O (at most this many reads/writes at once)."""
    create_root: bool = True
    """Create the root directory (mode 0700) when it is missing. Turn off to fail
    fast when a volume is expected to be mounted there."""


@contextmanager
def _mapped_os_errors(what: str) -> Iterator[None]:
    """Turn OSError into the store's errors, naming what was being done."""
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError as exc:
        raise NotFoundError(f"{what}: not found ({exc.filename})") from exc
    except PermissionError as exc:
        raise StoreConfigError(
            f"{what}: permission denied on {exc.filename}; the store root must be writable by this "
            "process (check the volume's owner / fsGroup)"
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise StoreConfigError(f"{what}: the store root is on a read-only filesystem") from exc
        if exc.errno in _TRANSIENT_ERRNOS:
            raise StoreUnavailable(f"{what}: {exc.strerror} ({exc.filename})") from exc
        raise StoreError(f"{what}: {exc}") from exc


class FilesystemStore(BlockingBackendStore):
    """:class:`swerollout.store.protocol.ResultStore` on a directory."""

    def __init__(self, root: Path, options: FilesystemOptions | None = None) -> None:
        self._options = options or FilesystemOptions()
        if not root.is_absolute():
            raise StoreConfigError(f"the filesystem store root must be an absolute path, got {str(root)!r}")
        if self._options.create_root and not root.is_dir():
            try:
                root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            except OSError as exc:
                # Whatever the errno, a root that cannot be created is a configuration problem.
                raise StoreConfigError(f"cannot create the filesystem store root {root}: {exc.strerror}") from exc
        if not root.is_dir():
            raise StoreConfigError(f"the filesystem store root {root} does not exist or is not a directory")
        with _mapped_os_errors(f"opening the store root {root}"):
            self._root = root.resolve(strict=True)
        self._root_uri = self._root.as_uri()
        super().__init__(self._root_uri, max_workers=self._options.max_workers)

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any]) -> FilesystemStore:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment or not parts.path.startswith("/"):
            raise StoreConfigError(
                f"filesystem store URL {url!r} must look like file:///absolute/path (no host, query or fragment)"
            )
        try:
            parsed = FilesystemOptions(**options)
        except ValidationError as exc:
            raise StoreConfigError(f"invalid options for the filesystem store: {exc}") from exc
        return cls(Path(parts.path), parsed)

    @property
    def root(self) -> Path:
        return self._root

    # -- keys and refs --

    def _ref(self, key: ObjectKey) -> str:
        return f"{self._root_uri}/{key}"

    def _parse_ref(self, ref: str) -> ObjectKey:
        if not isinstance(ref, str):
            raise InvalidRefError(f"a ref must be a string, got {type(ref).__name__}")
        normalized = "file:///" + ref[len("file://localhost/") :] if ref.startswith("file://localhost/") else ref
        prefix = self._root_uri + "/"
        if not normalized.startswith(prefix):
            raise InvalidRefError(f"ref {ref!r} is not inside this store (root {self._root_uri})")
        # The strict key grammar already rules out '..', '/' and '%' in components.
        return ObjectKey.parse(normalized[len(prefix) :], ref=ref)

    def _path(self, key: ObjectKey) -> Path:
        return self._inside_root(self._root.joinpath(*key.parts), what=f"object {self._ref(key)!r}")

    def _inside_root(self, path: Path, *, what: str) -> Path:
        # Defence in depth: the key grammar keeps paths inside the root, but a
        # symlink planted in the volume could still lead reads, writes or a
        # recursive delete elsewhere.
        if not path.resolve().is_relative_to(self._root):
            raise InvalidRefError(f"{what} resolves outside the store root {self._root}")
        return path

    def _ensure_dirs(self, key: ObjectKey) -> Path:
        # One level at a time: os.makedirs gives intermediate directories the
        # default mode, and every level must be 0700.
        current = self._root
        for part in key.parts[:3]:
            current = current / part
            try:
                current.mkdir(mode=DIR_MODE)
            except FileExistsError:
                pass
            # Checked per level, so nothing is created through a planted symlink.
            self._inside_root(current, what=f"the directory of {self._ref(key)!r}")
        return current

    # -- primitives --

    def _write(self, key: ObjectKey, body: BinaryIO, size: int) -> None:
        try:
            self._write_once(key, body)
        except NotFoundError as exc:
            # A delete_owner of the same rollout removed the directory between our
            # mkdir and open; nothing is half-written, so trying again is safe.
            raise StoreUnavailable(f"{exc}; the rollout's directory was removed while writing, try again") from exc

    def _write_once(self, key: ObjectKey, body: BinaryIO) -> None:
        with _mapped_os_errors(f"writing {self._ref(key)}"):
            directory = self._ensure_dirs(key)
            final = directory / key.sha256
            temp = directory / f".tmp-{key.sha256[:16]}-{secrets.token_hex(8)}"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            try:
                try:
                    while chunk := body.read(_WRITE_CHUNK):
                        view = memoryview(chunk)
                        while view:
                            written = os.write(fd, view)
                            view = view[written:]
                    if self._options.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp, final)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            if self._options.fsync:
                self._fsync_dir(directory)

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _stored_intact(self, key: ObjectKey, size: int) -> bool:
        # Hash what is there (not just its size) so that re-uploading repairs a
        # corrupted object instead of keeping it.
        path = self._root.joinpath(*key.parts)
        try:
            with _mapped_os_errors(f"checking {self._ref(key)}"):
                if path.stat().st_size != size:
                    return False
                digest = hashlib.sha256()
                with open(path, "rb") as handle:
                    while chunk := handle.read(_READ_CHUNK):
                        digest.update(chunk)
                return digest.hexdigest() == key.sha256
        except NotFoundError:
            return False

    def _read(self, key: ObjectKey) -> bytes:
        ref = self._ref(key)
        try:
            with _mapped_os_errors(f"reading {ref}"):
                return self._path(key).read_bytes()
        except NotFoundError:
            raise NotFoundError(f"object {ref!r} does not exist in the store") from None

    def _iter_chunks(self, key: ObjectKey, chunk_size: int) -> Generator[bytes, None, None]:
        ref = self._ref(key)
        try:
            with _mapped_os_errors(f"reading {ref}"):
                handle = open(self._path(key), "rb")
        except NotFoundError:
            raise NotFoundError(f"object {ref!r} does not exist in the store") from None
        with handle, _mapped_os_errors(f"reading {ref}"):
            while chunk := handle.read(chunk_size):
                yield chunk

    def _exists(self, key: ObjectKey) -> bool:
        with _mapped_os_errors(f"checking {self._ref(key)}"):
            return self._path(key).is_file()

    def _list(self, owner: Owner | None) -> Iterator[tuple[ObjectKey, int]]:
        with _mapped_os_errors("listing the store"):
            if owner is None:
                owner_dirs = [
                    (ns.name, uid.name, Path(uid.path))
                    for ns in _subdirs(self._root)
                    for uid in _subdirs(Path(ns.path))
                ]
            else:
                owner_dirs = [(owner.namespace, owner.uid, self._root / owner.namespace / owner.uid)]
            for namespace, uid, owner_dir in owner_dirs:
                for kind_dir in _subdirs(owner_dir):
                    if kind_dir.name not in _KIND_NAMES:
                        continue
                    for entry in _scandir(Path(kind_dir.path)):
                        if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                            continue
                        try:
                            key = ObjectKey.parse(f"{namespace}/{uid}/{kind_dir.name}/{entry.name}", ref=entry.path)
                        except InvalidRefError:
                            continue  # not one of ours; never count or serve it
                        yield key, entry.stat(follow_symlinks=False).st_size

    def _delete_owner(self, owner: Owner) -> int:
        owner_dir = self._root / owner.namespace / owner.uid
        with _mapped_os_errors(f"deleting the objects of {owner.prefix}"):
            self._inside_root(owner_dir, what=f"the directory of {owner.prefix}")
        deleted = sum(1 for _ in self._list(owner))
        with _mapped_os_errors(f"deleting the objects of {owner.prefix}"):
            try:
                shutil.rmtree(owner_dir)
            except FileNotFoundError:
                return 0
        return deleted

    def _check(self) -> None:
        with _mapped_os_errors(f"checking the store root {self._root}"):
            probe = self._root / f".probe-{secrets.token_hex(8)}"
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            os.close(fd)
            probe.unlink()


def _scandir(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def _subdirs(directory: Path) -> list[os.DirEntry[str]]:
    return [e for e in _scandir(directory) if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
