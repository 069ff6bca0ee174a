"""The image's locked runtime set (requirements-runtime.lock, `make lock`): the same pins the
tests run with, exactly the `image` extra's dependency closure, and what the Dockerfile installs.

The closure is walked through the metadata of this venv's packages, which `make venv`
installs from requirements.lock: every pin there is the version the runtime lock names."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

from packaging.requirements import Requirement

from swerollout_dev.cluster.buildinputs import copy_sources, logical_lines
from tests.support.locks import FULL_LOCK, ROOT, RUNTIME_LOCK, locked_pins, normalize

PROJECT = "swerollout"
IMAGE_EXTRA = "image"


def _wanted(requirement: Requirement, extras: frozenset[str]) -> bool:
    """Whether a dependency applies here (Python 3.11 on Linux, like the lock) with ``extras``."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in {"", *extras})


def _project_requirements(extras: frozenset[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in sorted(extras):
        found += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return found


def _closure(extras: frozenset[str]) -> set[str]:
    """The distributions ``swerollout[extras]`` needs, by normalized name."""
    seen: set[str] = set()
    expanded: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(PROJECT, extras)]
    while todo:
        name, wanted_extras = todo.pop()
        if (name, wanted_extras) in expanded:
            continue
        expanded.add((name, wanted_extras))
        if name == PROJECT:
            requirements = _project_requirements(wanted_extras)
        else:
            seen.add(name)
            try:
                requires = importlib.metadata.distribution(name).requires or []
            except importlib.metadata.PackageNotFoundError:
                raise AssertionError(f"{name} is needed by the image but not installed here; run `make venv`") from None
            requirements = [Requirement(r) for r in requires]
        for req in requirements:
            if _wanted(req, wanted_extras):
                todo.append((normalize(req.name), frozenset(req.extras)))
    return seen


def test_every_runtime_pin_is_the_pin_the_tests_run_with() -> None:
    full, runtime = locked_pins(FULL_LOCK), locked_pins(RUNTIME_LOCK)
    assert runtime, "requirements-runtime.lock pins nothing"
    missing = sorted(set(runtime) - set(full))
    assert not missing, f"pinned for the image but not in requirements.lock: {missing}; run `make lock`"
    differ = {name: (version, full[name]) for name, version in runtime.items() if full[name] != version}
    assert not differ, f"runtime pin != requirements.lock pin (runtime, full): {differ}; run `make lock`"


def test_the_runtime_lock_is_exactly_the_image_extras_closure() -> None:
    closure = _closure(frozenset({IMAGE_EXTRA}))
    runtime = set(locked_pins(RUNTIME_LOCK))
    assert not closure - runtime, (
        f"the image needs these but the runtime lock misses them: {sorted(closure - runtime)}; run `make lock`"
    )
    assert not runtime - closure, (
        f"the runtime lock pins what the image does not need: {sorted(runtime - closure)}; run `make lock`"
    )
    # The point of the second lock: none of the trainers' or the tests' heavy dependencies.
    assert not {"torch", "mypy", "pytest", "ray", "verl"} & runtime


def test_the_image_extra_covers_both_roles_in_the_image() -> None:
    """The image runs the operator (its Deployment) and the runner (rollout and eval pods)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    (self_reference,) = (Requirement(r) for r in extras[IMAGE_EXTRA])
    assert self_reference.name == PROJECT
    assert {"operator", "runner"} <= self_reference.extras <= set(extras)


def test_the_lock_target_writes_the_runtime_lock_as_its_header_says() -> None:
    header = RUNTIME_LOCK.read_text().splitlines()[1].removeprefix("#").strip()
    # uv's header leaves out -q; otherwise it is the command as run.
    commands = [
        line.strip().removeprefix("$(BIN)/").replace(" -q ", " ")
        for line in (ROOT / "Makefile").read_text().splitlines()
        if f"-o {RUNTIME_LOCK.name}" in line
    ]
    assert commands == [header], f"requirements-runtime.lock was made by `{header}`, not by `make lock` ({commands})"
    assert f"--extra {IMAGE_EXTRA} -c requirements.lock" in header


def test_the_dockerfile_installs_the_runtime_lock_without_resolving() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert RUNTIME_LOCK.name in copy_sources(dockerfile)
    assert FULL_LOCK.name not in copy_sources(dockerfile), "the image must not read the full lock"
    installs = [
        line
        for line in logical_lines(dockerfile)
        if line.startswith("RUN") and re.search(r"uv pip install .*-r \S*" + re.escape(RUNTIME_LOCK.name), line)
    ]
    assert len(installs) == 1, installs
    assert "--no-deps" in installs[0] and "uv pip check" in installs[0]
