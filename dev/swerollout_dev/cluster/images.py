"""Container images without a registry or a Docker daemon.

Base root filesystems come from Debian's packages with mmdebstrap (cached by
their package list), task images are that base plus a layer holding the task's
repository at its base commit, written directly as a docker-archive (what
`docker save` writes) and imported into the cluster's containerd. Nothing is
pulled: pods use these images by name with ``imagePullPolicy: IfNotPresent``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


class ImageBuildError(RuntimeError):
    pass


def image_cache_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "swerollout" / "images"


class ImageConfig(BaseModel):
    """The parts of an OCI image config that our images set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""


def _mirror() -> str:
    """The Debian mirror apt on this machine uses (mmdebstrap fetches from it)."""
    for source in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if not source.is_file():
            continue
        for line in source.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in words[-2]:
                return words[1] if not words[1].startswith("[") else words[2]
    return DEBIAN_MIRROR


def base_rootfs(packages: Sequence[str], *, variant: str = "apt") -> Path:
    """A Debian root filesystem tarball with ``packages``, built once and cached."""
    key = hashlib.sha256(f"{DEBIAN_SUITE}|{variant}|{','.join(sorted(packages))}".encode()).hexdigest()[:16]
    out = image_cache_dir() / f"rootfs-{DEBIAN_SUITE}-{key}.tar"
    if out.is_file():
        return out
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap is missing; install it with hack/install-cluster-deps.sh")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Our own temporary name: `tasks build-images` and `cluster up` may build it at once.
    tmp = out.with_suffix(f".{os.getpid()}.tmp.tar")
    argv = ["mmdebstrap", "--quiet", f"--variant={variant}"]
    if packages:
        argv.append(f"--include={','.join(packages)}")
    argv += [DEBIAN_SUITE, str(tmp), _mirror()]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ImageBuildError(f"mmdebstrap failed: {proc.stderr.strip()[-2000:]}")
    tmp.replace(out)
    return out


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_layer(source: Path, prefix: str, dest: Path) -> Path:
    """A layer tarball holding ``source``'s files under ``/prefix``, owned by root, with
    fixed timestamps (so the same tree makes the same layer)."""

    def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(source, arcname=prefix.strip("/"), filter=reset)
    return dest


def bytes_layer(files: dict[str, tuple[bytes, int]], dest: Path) -> Path:
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return dest


def symlink_layer(links: dict[str, str], dest: Path) -> Path:
    """A layer of symlinks (path in the image -> target)."""
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, target in links.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(info)
    return dest


def docker_archive(tag: str, layers: Sequence[Path], config: ImageConfig, dest: Path) -> Path:
    """Write ``dest``: an image of ``layers`` (uncompressed tarballs, base first) named ``tag``."""
    diff_ids = [f"sha256:{_sha256_file(layer)}" for layer in layers]
    image_config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": list(config.env),
                "Entrypoint": list(config.entrypoint) or None,
                "Cmd": list(config.cmd) or None,
                "WorkingDir": config.working_dir,
                "User": config.user,
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            # One history entry per layer: buildah refuses a base whose history and layers disagree.
            "created": "1970-01-01T00:00:00Z",
            "history": [
                {"created": "1970-01-01T00:00:00Z", "created_by": f"swerollout: {layer.name}"} for layer in layers
            ],
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(image_config).hexdigest() + ".json"
    layer_names = [f"{d.split(':', 1)[1]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": layer_names}]).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for layer, name in zip(layers, layer_names, strict=True):
            tar.add(layer, arcname=name)
        for name, data in ((config_name, image_config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(dest)
    return dest


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    image_cache_dir().mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=image_cache_dir(), prefix="build-")
