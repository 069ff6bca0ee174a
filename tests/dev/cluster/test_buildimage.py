"""buildah's storage is emptied before a build only when the disk under it runs short."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from swerollout_dev.cluster import buildimage, images


def _usage(free: int) -> Any:
    return lambda path: shutil._ntuple_diskusage(total=10 * free + 1, used=0, free=free)  # type: ignore[attr-defined]


@pytest.mark.parametrize("free, emptied", [(buildimage.MIN_FREE_BYTES, False), (buildimage.MIN_FREE_BYTES - 1, True)])
def test_storage_is_emptied_only_when_the_disk_runs_short(
    free: int, emptied: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(images, "image_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(buildimage.shutil, "disk_usage", _usage(free))
    monkeypatch.setattr(buildimage, "_buildah", lambda *args, **kw: calls.append(args))
    assert buildimage.reclaim_storage_if_low() is emptied
    # Containers first: a failed build's working container holds a mount over its layers.
    assert calls == ([("rm", "--all"), ("rmi", "--all", "--force")] if emptied else [])


def test_an_image_archive_another_checkout_used_within_the_hour_is_kept(tmp_path: Path) -> None:
    stem = "swerollout.local_swerollout_dev"
    newest, recent, stale = (tmp_path / f"{stem}-{key}.tar" for key in ("c", "b", "a"))
    other = tmp_path / "swerollout.local_other_dev-a.tar"
    for path in (newest, recent, stale, other):
        path.write_bytes(b"image")
    long_ago = time.time() - buildimage.ARCHIVE_KEEP_SECONDS - 60
    for path in (stale, other):
        os.utime(path, (long_ago, long_ago))
    assert buildimage.prune_archives(newest, stem) == [stale]
    assert newest.exists() and recent.exists() and other.exists()
