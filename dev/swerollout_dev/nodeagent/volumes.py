"""Pod volumes materialised as directories in the pod's private directory.

Secret and ConfigMap volumes become files (``items`` pick and rename keys;
``mode``/``defaultMode`` set permissions); emptyDir is an empty directory that
lives as long as the pod. Other volume kinds are refused with a clear message.
"""

from __future__ import annotations

import os
import shutil
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
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    selected = items if items is not None else [KeyToPath(key=k, path=k) for k in sorted(data)]
    for item in selected:
        if item.key not in data:
            raise ReferenceNotFound(f"{what}: key {item.key!r} not found")
        target = dest / _safe_relative(item.path, what)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[item.key])
        os.chmod(target, item.mode if item.mode is not None else default_mode)


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
