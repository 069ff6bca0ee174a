"""A dev-mode task's own Python environment: a virtualenv built once per requirements file.

A ``file://`` task image is a git repository; what its tests import beyond the standard
library and what our own environment provides (pytest) is listed in a requirements file
the image carries in its git directory, ``<repo>/.git/swerollout/requirements.txt``
(``swerollout tasks materialize`` writes it from ``task.yaml``'s ``requirements``; for any
other repository, copy a requirements file there). The git directory is not cloned, so
the file never shows in the agent's checkout or diff.

The node agent builds the environment before a sandbox container of that image starts and
puts its ``bin/`` first on the container's PATH: ``python`` and ``python -m pytest`` are
then the task's. The environment is keyed by the file's content and the interpreter, built
once under ``~/.cache/swerollout/task-envs/<key>/`` and shared by every pod of every task
that names the same set. What the task does not name (pytest) still comes from our own
environment, which a ``.pth`` file appends to the end of ``sys.path``: the task's packages
win where both have one.

pip installs from a wheelhouse first, with no index (``~/.cache/swerollout/wheels``,
``$SWEROLLOUT_WHEELHOUSE`` overrides): a machine that has built the environment once, or
whose wheelhouse was seeded with ``pip download -d``, needs no network. Only what the
wheelhouse lacks is downloaded into it, from the index pip is configured with.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from swerollout.tokenizers import cache_root

__all__ = ["TaskEnvError", "ensure_task_env", "requirements_file", "wheelhouse"]

# Bump when the layout of a built environment changes: old ones are then rebuilt.
_LAYOUT = "1"
_READY = ".swerollout-ready"
_PIP_TIMEOUT = 900.0


class TaskEnvError(Exception):
    """The task's environment cannot be built (fix the requirements, or seed the wheelhouse)."""


def requirements_file(repo: Path) -> Path:
    """Where a ``file://`` task image keeps its requirements: inside its git directory."""
    git_dir = repo / ".git"
    return (git_dir if git_dir.is_dir() else repo) / "swerollout" / "requirements.txt"


def _cache_base() -> Path:
    return cache_root().parent


def wheelhouse() -> Path:
    return Path(os.environ.get("SWEROLLOUT_WHEELHOUSE") or _cache_base() / "wheels")


def _key(requirements: str, python: Path) -> str:
    # The environment's own path as well as the interpreter it resolves to: every venv's
    # bin/python links to the same base interpreter, but each task environment falls back
    # to the site-packages of the venv that built it (_fall_back_to), so two checkouts'
    # venvs must never share one (the other's may lack pytest, or be gone).
    digest = hashlib.sha256()
    for part in (_LAYOUT, str(python.absolute()), str(python.resolve()), sys.version, requirements):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _run(argv: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=_PIP_TIMEOUT,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"},
    )
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
    return done


def _last_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or [f"exit code {done.returncode}"])[-1][:300]


def ensure_task_env(requirements: Path, python_bin_dir: Path) -> Path:
    """The environment for ``requirements`` (built now if missing); returns its directory.

    Blocking: the node agent calls it in a thread. Safe to call from several processes at
    once: one builds under a lock, the others wait and reuse it.
    """
    text = requirements.read_text(encoding="utf-8")
    python = python_bin_dir / "python"
    envs = _cache_base() / "task-envs"
    envs.mkdir(parents=True, exist_ok=True)
    env = envs / _key(text, python)
    if (env / _READY).is_file():
        return env
    with open(envs / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (env / _READY).is_file():
            return env
        shutil.rmtree(env, ignore_errors=True)  # a build that died half-way
        env.mkdir()
        log = env / "build.log"
        (env / "requirements.txt").write_text(text, encoding="utf-8")
        done = _run([str(python), "-m", "venv", "--without-pip", str(env)], log)
        if done.returncode != 0:
            raise TaskEnvError(f"python -m venv {env} failed: {_last_error(done)}")
        if any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
            _install(env, python, requirements, log)
        _fall_back_to(env, python)
        (env / _READY).write_text(text, encoding="utf-8")
    return env


def _install(env: Path, python: Path, requirements: Path, log: Path) -> None:
    """pip install into ``env`` from the wheelhouse with no index; download into it what it lacks."""
    house = wheelhouse()
    house.mkdir(parents=True, exist_ok=True)
    pip = [str(python), "-m", "pip", "--python", str(env / "bin" / "python")]
    offline = [*pip, "install", "--no-index", "--find-links", str(house), "-r", str(env / "requirements.txt")]
    if _run(offline, log).returncode != 0:
        fetched = _run(
            [str(python), "-m", "pip", "download", "-d", str(house), "-r", str(env / "requirements.txt")],
            log,
        )
        if fetched.returncode != 0:
            raise TaskEnvError(
                f"cannot build the task environment for {requirements}: pip download failed "
                f"({_last_error(fetched)}); seed {house} with `pip download -d {house} -r {requirements}` "
                f"on a machine with an index (log: {log})"
            )
        done = _run(offline, log)
        if done.returncode != 0:
            raise TaskEnvError(f"cannot install {requirements} into {env}: {_last_error(done)} (log: {log})")


def _fall_back_to(env: Path, python: Path) -> None:
    """Append our environment's site-packages to the task environment's sys.path."""
    ours = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    theirs = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    # An "import" line of a .pth file runs at startup; addsitedir also reads our .pth files
    # (the editable install's finders, pytest plugins), which a plain path line would not.
    Path(theirs, "_swerollout_fallback.pth").write_text(f"import site; site.addsitedir({ours!r})\n", encoding="utf-8")
