"""The bundled SWE tasks: small repositories under examples/tasks/ turned into SWE-bench instances.

Each task is a folder ``examples/tasks/<name>/`` holding

- ``repo/``                the source tree at the buggy base commit (plain files: we
                           cannot commit nested git repositories),
- ``task.yaml``            instance id, repo name, version, FAIL_TO_PASS, PASS_TO_PASS,
- ``problem_statement.md`` the issue text shown to the agent,
- ``gold.patch``           the reference fix (source only),
- ``test.patch``           the tests that fail before the fix,
- ``eval.sh``              the eval script (prints SWE-bench's test-output markers).

`materialize_repo` turns ``repo/`` into a git repository with fixed author, committer
and dates, so the base commit hash depends only on the files and is recorded in
``examples/tasks/instances.jsonl`` (SWE-bench instance format). That committed index
writes the image as ``file:<task name>`` (relative to wherever the repositories get
materialized); `materialize_tasks` rewrites it to ``file://<absolute path>``, the form
the dev-mode node agent checks out.

Instance rows themselves (`SWEBenchInstance`, loading, translation to the API) live in
`swerollout.instances`, which the library uses without this dev-only module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import EvalType
from swerollout.instances import (
    SWEBENCH_PARSER_PREFIX,
    InstanceError,
    SWEBenchInstance,
    load_instances,
    write_instances,
)
from swerollout_dev.taskenv import requirements_file

__all__ = [
    "DEFAULT_TASKS_DIR",
    "INDEX_FILE",
    "TaskError",
    "TaskSpec",
    "build_index",
    "checkout",
    "load_instances",
    "materialize_repo",
    "materialize_tasks",
    "task_dirs",
    "write_instances",
    "write_requirements",
]

DEFAULT_TASKS_DIR = Path(__file__).resolve().parents[2] / "examples" / "tasks"
"""The tasks bundled with the source tree (the package is installed in editable mode)."""

INDEX_FILE = "instances.jsonl"

# Everything that goes into a commit hash besides the files. Fixed so that the same
# tree always gives the same base commit on every machine.
_COMMIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "swerollout tasks",
    "GIT_AUTHOR_EMAIL": "tasks@swerollout.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "swerollout tasks",
    "GIT_COMMITTER_EMAIL": "tasks@swerollout.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
}
# Files that appear when someone runs the tests inside examples/ and must never
# change the hash.
_IGNORED_NAMES = {"__pycache__", ".pytest_cache", ".git"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")


class TaskError(InstanceError):
    """A task folder, index or repository is not usable. Retrying does not help: fix the files."""


class TaskSpec(BaseModel):
    """``task.yaml``: what a task folder says about itself."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    repo: str
    version: str
    fail_to_pass: list[str] = Field(min_length=1)
    """Tests that fail at the base commit with the test patch and pass with the gold patch."""
    pass_to_pass: list[str] = Field(default_factory=list)
    """Tests that pass both before and after the gold patch."""
    log_parser: str = f"{SWEBENCH_PARSER_PREFIX}pytest"
    """SWE-bench parser name (a key of swebench's PARSER_REGISTRY)."""
    eval_type: EvalType = EvalType.PASS_AND_FAIL
    created_at: str = "2024-01-01T00:00:00Z"
    requirements: list[str] = Field(default_factory=list)
    """pip requirement lines the task's tests need beyond pytest (``inflection==0.5.1``). In dev
    mode they become the task's own environment (swerollout_dev.taskenv); empty: none."""


# --------------------------------------------------------------------------- git


def _git(args: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None) -> str:
    # The user's global/system git config (hooks, templates, signing, autocrlf) must not
    # leak into the commit, or the hash would differ between machines.
    full_env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **(env or {}),
    }
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=full_env, check=True, capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError as exc:
        raise TaskError("git is not installed; the tasks are materialized as git repositories") from exc
    except subprocess.CalledProcessError as exc:
        raise TaskError(f"git {' '.join(args)} failed in {cwd}: {exc.stderr.strip() or exc.stdout.strip()}") from exc
    return done.stdout


def _copy_tree(source: Path, dest: Path) -> None:
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if any(part in _IGNORED_NAMES for part in relative.parts) or path.name.endswith(_IGNORED_SUFFIXES):
            continue
        target = dest / relative
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            # Only the executable bit reaches git; normalise it so umask and checkout
            # modes cannot change the tree hash.
            target.chmod(0o755 if os.access(path, os.X_OK) else 0o644)


def materialize_repo(source: Path, dest: Path, *, message: str) -> str:
    """Create a git repository at `dest` with the files of `source` as one commit; return its hash.

    `dest` must not exist or must be a repository this function created before (it is
    replaced). The hash depends only on the files and `message`.
    """
    if dest.exists():
        if not (dest / ".git").is_dir():
            raise TaskError(f"{dest} exists and is not a materialized task repository; choose an empty --dest")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _copy_tree(source, dest)
    _git(["init", "--quiet", "--initial-branch=main"], dest)
    _git(["-c", "core.autocrlf=false", "add", "--all"], dest)
    _git(
        ["-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "--message", message],
        dest,
        env=_COMMIT_IDENTITY,
    )
    return _git(["rev-parse", "HEAD"], dest).strip()


def checkout(image: str, base_commit: str, dest: Path) -> Path:
    """A fresh private clone of a ``file://`` task image at `base_commit` (dev mode and tests)."""
    if not image.startswith("file://"):
        raise TaskError(f"image {image!r} is not a file:// repository; only those can be checked out locally")
    source = Path(image[len("file://") :])
    if not (source / ".git").exists():
        raise TaskError(
            f"image {image!r} points at {source}, which is not a git repository; run `swerollout tasks materialize`"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(["clone", "--quiet", "--no-hardlinks", "--no-checkout", str(source), str(dest)], dest.parent)
    _git(["checkout", "--quiet", "--detach", base_commit], dest)
    return dest


# --------------------------------------------------------------------------- tasks


def task_dirs(tasks_dir: Path = DEFAULT_TASKS_DIR) -> list[Path]:
    """Task folders (those with a task.yaml), sorted by name."""
    if not tasks_dir.is_dir():
        raise TaskError(f"tasks directory {tasks_dir} does not exist")
    return sorted(p.parent for p in tasks_dir.glob("*/task.yaml"))


def _read(task_dir: Path, name: str) -> str:
    path = task_dir / name
    if not path.is_file():
        raise TaskError(f"task {task_dir.name}: missing {name}")
    return path.read_text()


def load_task_spec(task_dir: Path) -> TaskSpec:
    try:
        return TaskSpec.model_validate(yaml.safe_load(_read(task_dir, "task.yaml")))
    except ValidationError as exc:
        raise TaskError(f"task {task_dir.name}: task.yaml is invalid: {one_line(exc, '')}") from exc


def _commit_message(spec: TaskSpec) -> str:
    return f"{spec.repo} {spec.version}: base of {spec.instance_id}\n"


def _instance(task_dir: Path, spec: TaskSpec, base_commit: str, image: str) -> SWEBenchInstance:
    return SWEBenchInstance(
        instance_id=spec.instance_id,
        repo=spec.repo,
        version=spec.version,
        base_commit=base_commit,
        problem_statement=_read(task_dir, "problem_statement.md"),
        created_at=spec.created_at,
        patch=_read(task_dir, "gold.patch"),
        test_patch=_read(task_dir, "test.patch"),
        FAIL_TO_PASS=spec.fail_to_pass,
        PASS_TO_PASS=spec.pass_to_pass,
        eval_script=_read(task_dir, "eval.sh"),
        image=image,
        log_parser=spec.log_parser,
        eval_type=spec.eval_type,
    )


def materialize_tasks(dest: Path, tasks_dir: Path = DEFAULT_TASKS_DIR) -> list[SWEBenchInstance]:
    """Write every task's repository under `dest/<task name>` and `dest/instances.jsonl`.

    The returned instances have ``image: file://<absolute repo path>``. Fails when a
    materialized base commit differs from the one the committed index records, which
    means the task files changed without `swerollout tasks index`.
    """
    dest = dest.resolve()
    recorded = (
        {i.instance_id: i.base_commit for i in load_instances(tasks_dir / INDEX_FILE)}
        if (tasks_dir / INDEX_FILE).exists()
        else {}
    )
    instances = []
    for task_dir in task_dirs(tasks_dir):
        spec = load_task_spec(task_dir)
        repo_path = dest / task_dir.name
        commit = materialize_repo(task_dir / "repo", repo_path, message=_commit_message(spec))
        expected = recorded.get(spec.instance_id)
        if expected is not None and expected != commit:
            raise TaskError(
                f"task {task_dir.name}: materialized base commit {commit} differs from {expected} in "
                f"{tasks_dir / INDEX_FILE}; regenerate it with `swerollout tasks index`"
            )
        write_requirements(repo_path, spec.requirements)
        instances.append(_instance(task_dir, spec, commit, f"file://{repo_path}"))
    write_instances(instances, dest / INDEX_FILE)
    return instances


def write_requirements(repo: Path, requirements: Sequence[str] | Path) -> Path | None:
    """Give a ``file://`` task image its own environment: write the requirements (lines, or a
    requirements file to copy) where the node agent looks (swerollout_dev.taskenv). Nothing is
    written for an empty list; the repository's tree and base commit never change."""
    lines = (
        requirements.read_text(encoding="utf-8")
        if isinstance(requirements, Path)
        else "".join(f"{line}\n" for line in requirements)
    )
    target = requirements_file(repo)
    if not lines.strip():
        target.unlink(missing_ok=True)
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(lines, encoding="utf-8")
    return target


def build_index(scratch: Path, tasks_dir: Path = DEFAULT_TASKS_DIR) -> list[SWEBenchInstance]:
    """The committed index: like `materialize_tasks` but with relative ``file:<name>`` images."""
    instances = []
    for task_dir in task_dirs(tasks_dir):
        spec = load_task_spec(task_dir)
        commit = materialize_repo(task_dir / "repo", scratch / task_dir.name, message=_commit_message(spec))
        instances.append(_instance(task_dir, spec, commit, f"file:{task_dir.name}"))
    return instances
