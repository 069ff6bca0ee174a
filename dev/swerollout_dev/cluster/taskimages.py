"""One container image per bundled task: the Debian base (Python, pytest, git) plus a
layer holding the task's repository at its base commit in /testbed.

This is what SWE-bench's task images are to the real benchmark, made here without
Docker or a registry: the layer is written directly and the image saved as a
docker-archive that `ctr images import` loads into the cluster's containerd.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from swerollout.instances import SWEBenchInstance
from swerollout_dev import tasks

from . import images
from .buildimage import BASE_PACKAGES

WORKDIR = "/testbed"
REGISTRY = "swerollout.local/tasks"

BUNDLE_LIBRARIES = ("libssl3", "libffi8", "zlib1g", "libexpat1")
"""What the swerex bundle built with ``BUNDLE_PYTHON=base`` needs from a task image
besides glibc (Debian's essential set): its CPython's shared libraries."""
MINIMAL_PACKAGES = ("git", "patch", *BUNDLE_LIBRARIES)
"""A task image without Python: git and patch (the agent's and the eval's patches),
and the bundle's libraries. The bundle brings the only Python the sandbox runs."""


class TaskImage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instance: SWEBenchInstance
    """The task, with ``image`` set to the image's name."""
    archive: Path


def image_name(task_dir_name: str, base_commit: str) -> str:
    return f"{REGISTRY}/{task_dir_name}:{base_commit[:12]}"


def build_task_images(tasks_dir: Path = tasks.DEFAULT_TASKS_DIR) -> list[TaskImage]:
    """Build (or reuse, when the archive exists) every bundled task's image."""
    rootfs = images.base_rootfs(BASE_PACKAGES)
    out = images.image_cache_dir() / "tasks"
    out.mkdir(parents=True, exist_ok=True)
    built = []
    with images.scratch_dir() as scratch:
        # SWE-bench eval scripts run `python -m pytest`; Debian names it python3 only
        # (python-is-python3 adds the alias; this layer is the same symlink).
        python_alias = images.symlink_layer({"usr/bin/python": "python3"}, Path(scratch) / "python-alias.tar")
        repos = Path(scratch) / "repos"
        for instance in tasks.materialize_tasks(repos, tasks_dir):
            repo = Path(instance.image.removeprefix("file://"))
            name = image_name(repo.name, instance.base_commit)
            archive = out / f"{repo.name}-{instance.base_commit[:12]}.tar"
            if not archive.is_file():
                layer = images.tree_layer(repo, WORKDIR, Path(scratch) / f"{repo.name}.tar")
                config = images.ImageConfig(working_dir=WORKDIR, cmd=("/bin/sh",))
                images.docker_archive(name, [rootfs, python_alias, layer], config, archive)
            built.append(TaskImage(instance=instance.model_copy(update={"image": name}), archive=archive))
    return built


def repo_image(name: str, repo: Path, packages: Sequence[str], archive: Path) -> Path:
    """An image of a Debian root filesystem with ``packages`` and ``repo`` (a git
    repository, .git included) in /testbed: any task image, Python or not."""
    rootfs = images.base_rootfs(packages)
    with images.scratch_dir() as scratch:
        layer = images.tree_layer(repo, WORKDIR, Path(scratch) / "repo.tar")
        config = images.ImageConfig(working_dir=WORKDIR, cmd=("/bin/sh",))
        return images.docker_archive(name, [rootfs, layer], config, archive)
