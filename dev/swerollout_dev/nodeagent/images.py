"""What an image name means on a machine without a container runtime.

- A runner/operator image (configurable globs) is the installed Python
  environment: its bin directory goes first on PATH.
- ``file://<absolute path of a git repository>`` is a task image: the container
  gets a fresh private clone checked out at the base commit
  (``SWEROLLOUT_BASE_COMMIT`` in the container's env, default HEAD) as its
  working directory.
- Anything else cannot be run here: the container waits with ErrImagePull /
  InvalidImageName and a message naming the image.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from .config import NodeAgentConfig
from .errors import ContainerConfigError, ImageError

BASE_COMMIT_ENV = "SWEROLLOUT_BASE_COMMIT"


@dataclass(frozen=True)
class PythonEnvImage:
    bin_dir: Path


@dataclass(frozen=True)
class GitRepoImage:
    repo: Path


Image = PythonEnvImage | GitRepoImage


def resolve_image(image: str, config: NodeAgentConfig) -> Image:
    if not image:
        raise ImageError("container has no image; set spec.containers[].image", reason="InvalidImageName")
    if image.startswith("file://"):
        path = Path(image[len("file://") :])
        if not path.is_absolute():
            raise ImageError(
                f"image {image!r}: a file:// image must name an absolute path, e.g. file:///srv/repos/astropy",
                reason="InvalidImageName",
            )
        if not (path / ".git").exists() and not (path / "HEAD").is_file():
            raise ImageError(f"image {image!r}: {path} is not a git repository on this node")
        return GitRepoImage(repo=path)
    if config.is_runner_image(image):
        return PythonEnvImage(bin_dir=config.python_bin_dir)
    raise ImageError(
        f"image {image!r} cannot run on the local node agent: it runs only runner images "
        f"({', '.join(config.runner_images)}) and file:///<git repository> task images"
    )


def resolve_argv(container_name: str, image: str, command: list[str] | None, args: list[str] | None) -> list[str]:
    """Kubernetes rules: command replaces the entrypoint, args replace the image's cmd.

    Local images carry no entrypoint/cmd, so a container without ``command`` cannot
    start (args alone would be arguments to nothing).
    """
    if not command:
        raise ContainerConfigError(
            f"container {container_name!r}: image {image!r} has no entrypoint on the local node agent; "
            "set spec.containers[].command (args alone are not enough)"
        )
    return [*command, *(args or [])]


async def checkout(repo: Path, dest: Path, commit: str) -> None:
    """A fresh private clone of ``repo`` at ``commit`` (idempotent: an existing clone is kept,
    so a restarted container sees the files its previous run left)."""
    if (dest / ".git").exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    await _git("clone", "--quiet", "--no-checkout", str(repo), str(tmp))
    await _git("-C", str(tmp), "checkout", "--quiet", "--detach", commit)
    tmp.rename(dest)


async def _git(*argv: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise ImageError(f"git {' '.join(argv)} failed: {out.decode(errors='replace').strip()}")
