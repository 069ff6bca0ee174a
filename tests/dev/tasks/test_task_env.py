"""A dev-mode task with dependencies: its requirements travel in the image's git directory and
become a virtualenv built once (swerollout_dev.taskenv), with real pip and a real package our
own environment lacks (inflection, from examples/tasks-with-requirements).

The first run on a machine downloads one small wheel into the wheelhouse; every later build
installs from it with no index (docs/dev-mode.md says how to seed it offline).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runner.eval.grading import parse_pytest_log
from swerollout.cli.main import main
from swerollout.instances import SWEBenchInstance
from swerollout_dev import tasks
from swerollout_dev.taskenv import TaskEnvError, ensure_task_env, requirements_file, wheelhouse
from tests.support.devstack import ROOT

WITH_REQUIREMENTS = ROOT / "examples" / "tasks-with-requirements"


@pytest.fixture(scope="module")
def wordkit(tmp_path_factory: pytest.TempPathFactory) -> SWEBenchInstance:
    (instance,) = tasks.materialize_tasks(tmp_path_factory.mktemp("tasks"), WITH_REQUIREMENTS)
    return instance


def _run(repo: Path, script: str, path: str) -> str:
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _apply(repo: Path, patch: str) -> None:
    subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, check=True, capture_output=True, text=True)


def test_the_requirements_are_written_outside_the_tree(wordkit: SWEBenchInstance, tmp_path: Path) -> None:
    assert importlib.util.find_spec("inflection") is None, "the test needs a package our venv lacks"
    repo = Path(wordkit.image.removeprefix("file://"))
    assert requirements_file(repo) == repo / ".git" / "swerollout" / "requirements.txt"
    assert requirements_file(repo).read_text() == "inflection==0.5.1\n"
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=repo, capture_output=True, text=True)
    assert status.stdout == ""
    clone = tasks.checkout(wordkit.image, wordkit.base_commit, tmp_path / "clone")
    assert not list(clone.rglob("requirements.txt")), "the agent's checkout never sees it"
    bundled = tasks.materialize_tasks(tmp_path / "bundled")
    assert not any(requirements_file(Path(i.image.removeprefix("file://"))).exists() for i in bundled)


def test_the_environment_is_built_once_and_grades_the_gold_patch(wordkit: SWEBenchInstance, tmp_path: Path) -> None:
    repo = Path(wordkit.image.removeprefix("file://"))
    ours = str(Path(sys.executable).parent)  # the bin the node agent maps runner images to
    env = ensure_task_env(requirements_file(repo), Path(ours))
    ready = env / ".swerollout-ready"
    built_at = ready.stat().st_mtime_ns
    assert ensure_task_env(requirements_file(repo), Path(ours)) == env and ready.stat().st_mtime_ns == built_at
    assert any(wheelhouse().glob("inflection-0.5.1-*.whl")), "later builds install from the wheelhouse"

    work = tasks.checkout(wordkit.image, wordkit.base_commit, tmp_path / "work")
    _apply(work, wordkit.test_patch)
    system = "/usr/local/bin:/usr/bin:/bin"
    # Our environment alone (what a dev-mode sandbox had): the tests cannot even be collected.
    alone = _run(work, wordkit.eval_script, f"{system}:{ours}")
    assert "No module named 'inflection'" in alone
    # The task's environment first, ours after it (the node agent's PATH): pytest still comes from ours.
    path = f"{env / 'bin'}:{system}:{ours}"
    before = parse_pytest_log(_run(work, wordkit.eval_script, path))
    _apply(work, wordkit.patch)
    after = parse_pytest_log(_run(work, wordkit.eval_script, path))
    assert {before[t] for t in wordkit.FAIL_TO_PASS} == {"FAILED"}
    assert {before[t] for t in wordkit.PASS_TO_PASS} == {"PASSED"}
    assert set(after) == {*wordkit.FAIL_TO_PASS, *wordkit.PASS_TO_PASS} and set(after.values()) == {"PASSED"}


def test_cli_requirements_writes_and_removes_the_environment_file(
    wordkit: SWEBenchInstance, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    tasks.materialize_repo(WITH_REQUIREMENTS / "wordkit-tables" / "repo", repo, message="base\n")
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("inflection==0.5.1\n")
    assert main(["tasks", "requirements", str(repo), str(wanted)]) == 0
    assert requirements_file(repo).read_text() == "inflection==0.5.1\n"
    assert f"wrote {requirements_file(repo)}" in capsys.readouterr().out
    (tmp_path / "empty.txt").write_text("\n")
    assert main(["tasks", "requirements", str(repo), str(tmp_path / "empty.txt")]) == 0
    assert not requirements_file(repo).exists()
    assert main(["tasks", "requirements", str(tmp_path), str(wanted)]) == 1
    assert "is not a git repository" in capsys.readouterr().err


def test_a_build_that_fails_says_why_and_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No index is needed to fail: a requirement naming a missing local path fails offline and online."""
    monkeypatch.setenv("SWEROLLOUT_CACHE", str(tmp_path / "cache"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{tmp_path / 'no-such-project'}\n")
    with pytest.raises(TaskEnvError) as failed:
        ensure_task_env(requirements, Path(sys.executable).parent)
    message = str(failed.value)
    assert message.startswith(f"cannot build the task environment for {requirements}: pip download failed")
    assert f"pip download -d {tmp_path / 'cache' / 'wheels'} -r {requirements}" in message
    (env,) = (tmp_path / "cache" / "task-envs").glob("*/")
    assert not (env / ".swerollout-ready").exists() and "no-such-project" in (env / "build.log").read_text()
    with pytest.raises(TaskEnvError):  # the half-built environment is never handed out: built again
        ensure_task_env(requirements, Path(sys.executable).parent)
    assert (env / "build.log").read_text().count("$ ") == 3, "venv, install, download: once each, afresh"


def test_each_venv_gets_its_own_task_environment(tmp_path: Path) -> None:
    """Two venvs link the same base interpreter, yet each task environment falls back to the
    site-packages of the venv that built it: a shared one handed another checkout's venv (one
    without pytest, or one deleted since) to the next, and its gold patch graded 0."""
    from swerollout_dev.taskenv import _key

    for name in ("a", "b"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    first, second = (tmp_path / name / "bin" / "python" for name in ("a", "b"))
    assert first.resolve() == second.resolve()
    assert _key("inflection==0.5.1\n", first) != _key("inflection==0.5.1\n", second)
    assert _key("inflection==0.5.1\n", first) == _key("inflection==0.5.1\n", first)
