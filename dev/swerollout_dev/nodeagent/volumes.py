"""Pod volumes materialised as directories in the pod's private directory.

Secret and ConfigMap volumes become files (``items`` pick and rename keys;
``mode``/``defaultMode`` set permissions); emptyDir is an empty directory that
lives as long as the pod. Other volume kinds are refused with a clear message.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from .env import Lookup
from .errors import ContainerConfigError, ReferenceNotFound
from .podspec import KeyToPath, Volume


def _safe_relative(path: str, what: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ContainerConfigError(f"{what}: path {path!r} must be relative and stay inside the volume")
    return rel


def _write_keys(
    dest: Path, data: Mapping[str, bytes], items: list[KeyToPath] | None, default_mode: int, what: str
) -> None:
    """Bring the volume's files to ``data``, in place.

    Running containers see the volume through a bind mount of this very directory:
    replacing the directory (or a directory under it) would leave them an empty, deleted
    one, so a node agent that restarts and refreshes its pods' volumes would take the
    runner's Secret from under it. The directory stays; each file is replaced whole (a
    reader sees the old bytes or the new, never a part), and keys no longer selected go.
    """
    selected = items if items is not None else [KeyToPath(key=k, path=k) for k in sorted(data)]
    wanted: dict[Path, tuple[bytes, int]] = {}
    for item in selected:  # every key checked before anything on disk changes
        if item.key not in data:
            raise ReferenceNotFound(f"{what}: key {item.key!r} not found")
        mode = item.mode if item.mode is not None else default_mode
        wanted[dest / _safe_relative(item.path, what)] = (data[item.key], mode)
    dest.mkdir(parents=True, exist_ok=True)
    for target, (body, mode) in wanted.items():
        _ensure_parents(dest, target.parent)
        _replace_file(target, body, mode)
    keep = set(wanted) | {parent for target in wanted for parent in target.parents}
    # Bottom up, never through a symlink: a container that can write to its volume could
    # plant one pointing anywhere on the host, and this runs as root.
    for root, dirs, files in os.walk(dest, topdown=False):
        for name in files:
            if (path := Path(root) / name) not in keep:
                path.unlink()
        for name in dirs:
            path = Path(root) / name
            if path.is_symlink():
                path.unlink()
            elif path not in keep and not any(path.iterdir()):
                path.rmdir()


def _ensure_parents(dest: Path, directory: Path) -> None:
    current = dest
    for part in directory.relative_to(dest).parts:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()  # a file where a key's directory now goes
        current.mkdir(exist_ok=True)


def _replace_file(target: Path, body: bytes, mode: int) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)  # a directory where a key's file now goes
    elif target.is_file() and not target.is_symlink():
        if stat.S_IMODE(target.stat().st_mode) == mode and target.read_bytes() == body:
            return
    temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        temp.write_bytes(body)
        os.chmod(temp, mode)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def materialise(volume: Volume, pod_volumes_dir: Path, lookup: Lookup) -> Path:
    """Create (or refresh) the volume's directory; return it."""
    dest = pod_volumes_dir / volume.name
    if volume.empty_dir is not None:
        dest.mkdir(parents=True, exist_ok=True)
        return dest
    if volume.secret is not None:
        src = volume.secret
        what = f"volume {volume.name!r} (Secret {src.secret_name!r})"
        data = lookup("Secret", src.secret_name)
        if data is None:
            if not src.optional:
                raise ReferenceNotFound(f"{what}: Secret not found")
            data = {}
        _write_keys(dest, data, src.items, src.default_mode, what)
        return dest
    if volume.config_map is not None:
        cm = volume.config_map
        what = f"volume {volume.name!r} (ConfigMap {cm.name!r})"
        data = lookup("ConfigMap", cm.name)
        if data is None:
            if not cm.optional:
                raise ReferenceNotFound(f"{what}: ConfigMap not found")
            data = {}
        _write_keys(dest, data, cm.items, cm.default_mode, what)
        return dest
    raise ContainerConfigError(
        f"volume {volume.name!r}: only emptyDir, secret and configMap volumes run on the local node agent"
    )
