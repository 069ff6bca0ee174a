"""Build the swerollout image from our Dockerfile with buildah, offline.

No registry is reachable, so the Dockerfile's base comes from a local Debian root
filesystem (mmdebstrap, see images.py) given as ``BASE_IMAGE``, and the swerex
bundle relocates that base's own CPython (``BUNDLE_PYTHON=base``) instead of
downloading python-build-standalone. The build still reaches PyPI and Debian's
mirror (the project's own dependency sources) through the host's network.

buildah keeps its storage under the image cache, apart from anyone's
containers/storage, with the overlay driver (vfs copies the whole root filesystem
at every step: tens of GB and many minutes for this Dockerfile).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from . import buildinputs, images

BASE_PACKAGES = ("python3", "python3-venv", "python3-pytest", "git", "ca-certificates", "passwd", "patch")
"""The Debian base: Python with venv (the Dockerfile's stages), pytest and git (task images)."""
BASE_IMAGE = "swerollout.local/base-python:bookworm"
IMAGE = "swerollout.local/swerollout:dev"


MIN_FREE_BYTES = 30 * 2**30
# An older image archive is kept this long after it was last built or reused.
ARCHIVE_KEEP_SECONDS = 3600.0
"""Below this much free disk where buildah keeps its storage, the storage is emptied before
a build. Every `bud --layers` leaves its layers and the images it replaced behind (47 GB
after one busy day here), and a build that runs out of space fails half-way; emptying only
costs the next build its layer cache."""

HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_ENV = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE")


def base_image_archive() -> Path:
    """The Debian base as an image archive (cached next to its rootfs).

    It carries this machine's CA bundle (and points pip and uv at it): where PyPI is
    reached through a TLS-intercepting proxy, the build's RUN steps need the same
    trust as the host. The bundle's hash is part of the archive's name.
    """
    rootfs = images.base_rootfs(BASE_PACKAGES)
    ca = HOST_CA_BUNDLE.read_bytes() if HOST_CA_BUNDLE.is_file() else b""
    archive = rootfs.with_name(f"{rootfs.stem}-image-{hashlib.sha256(ca).hexdigest()[:12]}.tar")
    if not archive.is_file():
        layers = [rootfs]
        env = images.ImageConfig().env
        with images.scratch_dir() as scratch:
            if ca:
                layers.append(
                    images.bytes_layer({str(HOST_CA_BUNDLE).lstrip("/"): (ca, 0o644)}, Path(scratch) / "ca.tar")
                )
                env += tuple(f"{name}={HOST_CA_BUNDLE}" for name in CA_ENV)
            images.docker_archive(BASE_IMAGE, layers, images.ImageConfig(env=env), archive)
    return archive


def _buildah(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    cache = images.image_cache_dir() / "buildah"
    argv = [
        "buildah",
        "--root",
        str(cache / "storage"),
        "--runroot",
        str(cache / "run"),
        "--storage-driver",
        "overlay",
        *args,
    ]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=dict(os.environ, BUILDAH_ISOLATION="chroot"),
    )
    if proc.returncode != 0:
        raise images.ImageBuildError(
            f"`buildah {' '.join(args)}` failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def reclaim_storage_if_low() -> bool:
    """Empty buildah's storage when the disk under it is short of MIN_FREE_BYTES; True if it did."""
    cache = images.image_cache_dir() / "buildah"
    cache.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(cache).free >= MIN_FREE_BYTES:
        return False
    _buildah("rm", "--all")  # working containers a failed build left, with their mounts
    _buildah("rmi", "--all", "--force")
    return True


def build_image(repo: Path, *, tag: str = IMAGE, extra_args: Sequence[str] = ()) -> Path:
    """Build ``tag`` from ``repo``/Dockerfile and write it as a docker-archive; returns the archive.

    The archive is named by the hash of the build's inputs (buildinputs.py): when
    nothing the Dockerfile copies, its text, the arguments or the base has changed,
    the archive built before is the image, and buildah does not run at all.
    """
    base = base_image_archive()
    args = ("--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--build-arg", "BUNDLE_PYTHON=base", *extra_args)
    key = buildinputs.inputs_hash(repo, repo / "Dockerfile", (*args, tag, base.name))[:16]
    stem = tag.replace("/", "_").replace(":", "_")
    archive = images.image_cache_dir() / f"{stem}-{key}.tar"
    if archive.is_file():
        os.utime(archive)  # in use: see the pruning below
        return archive
    reclaim_storage_if_low()
    _buildah("pull", f"docker-archive:{base}")
    _buildah(
        "bud", "--network=host", "--pull-never", "--layers", *args, "-t", tag, "-f", str(repo / "Dockerfile"), str(repo)
    )
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _buildah("push", tag, f"docker-archive:{partial}:{tag}")
    partial.rename(archive)
    prune_archives(archive, stem)
    return archive


def prune_archives(newest: Path, stem: str) -> list[Path]:
    """Remove the image archives of ``stem`` other than ``newest``; returns what went.

    Each is the whole image (hundreds of MB), but one that a run from another checkout
    built or reused within ARCHIVE_KEEP_SECONDS stays: that run may be about to import
    it (removing it at once failed such a run's `ctr images import`)."""
    removed = []
    for old in newest.parent.glob(f"{stem}-*.tar"):
        if old != newest and time.time() - old.stat().st_mtime > ARCHIVE_KEEP_SECONDS:
            old.unlink(missing_ok=True)
            removed.append(old)
    return removed
