"""The bundled tasks: stable base commits, a faithful index, and patches that do what they claim."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runner.eval.grading import parse_pytest_log
from swerollout import instances
from swerollout.api.v1alpha1 import Instance, LogParser
from swerollout.cli.main import main
from swerollout_dev import tasks

TASK_NAMES = [p.name for p in tasks.task_dirs()]
COMMITTED_INDEX = tasks.DEFAULT_TASKS_DIR / tasks.INDEX_FILE


def test_at_least_five_tasks_with_all_files() -> None:
    assert len(TASK_NAMES) >= 5
    for name in TASK_NAMES:
        folder = tasks.DEFAULT_TASKS_DIR / name
        for required in ("task.yaml", "problem_statement.md", "gold.patch", "test.patch", "eval.sh", "repo"):
            assert (folder / required).exists(), f"{name}: missing {required}"
        eval_script = (folder / "eval.sh").read_text()
        assert ">>>>> Start Test Output" in eval_script and ">>>>> End Test Output" in eval_script
        assert "python -m pytest -rA" in eval_script


def test_committed_index_matches_the_task_files(tmp_path: Path) -> None:
    """instances.jsonl is exactly what the task folders produce (so its base commits are right)."""
    assert tasks.build_index(tmp_path) == tasks.load_instances(COMMITTED_INDEX)


def test_materialize_gives_the_recorded_base_commits(tmp_path: Path) -> None:
    recorded = {i.instance_id: i.base_commit for i in tasks.load_instances(COMMITTED_INDEX)}
    instances = tasks.materialize_tasks(tmp_path / "out")
    assert {i.instance_id for i in instances} == set(recorded)
    for instance in instances:
        assert instance.image.startswith("file://")
        repo = Path(instance.image.removeprefix("file://"))
        assert repo.is_absolute() and repo.parent == (tmp_path / "out").resolve()
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
        assert head.stdout.strip() == recorded[instance.instance_id] == instance.base_commit
        assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    assert tasks.load_instances(tmp_path / "out" / tasks.INDEX_FILE) == instances
    # Again into the same place: replaced, same hashes.
    again = tasks.materialize_tasks(tmp_path / "out")
    assert [i.base_commit for i in again] == [i.base_commit for i in instances]


def test_base_commit_ignores_file_modes_and_stray_caches(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(tasks.DEFAULT_TASKS_DIR / "cachebox-lru" / "repo", source)
    clean = tasks.materialize_repo(source, tmp_path / "a", message="m\n")
    (source / "cachebox" / "__pycache__").mkdir()
    (source / "cachebox" / "__pycache__" / "lru.cpython-311.pyc").write_bytes(b"\0junk")
    (source / "cachebox" / "lru.py").chmod(0o600)
    assert tasks.materialize_repo(source, tmp_path / "b", message="m\n") == clean
    (source / "cachebox" / "lru.py").write_text("changed\n")
    assert tasks.materialize_repo(source, tmp_path / "c", message="m\n") != clean


def test_materialize_refuses_to_replace_a_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "out" / "cachebox-lru").mkdir(parents=True)
    (tmp_path / "out" / "cachebox-lru" / "precious.txt").write_text("keep me")
    with pytest.raises(tasks.TaskError, match="not a materialized task repository"):
        tasks.materialize_tasks(tmp_path / "out")
    assert (tmp_path / "out" / "cachebox-lru" / "precious.txt").read_text() == "keep me"


def _run_eval_script(repo: Path, script: str) -> str:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _apply(repo: Path, patch: str) -> None:
    subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def materialized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, instances.SWEBenchInstance]:
    return {Path(i.image).name: i for i in tasks.materialize_tasks(tmp_path_factory.mktemp("tasks"))}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_gold_patch_turns_fail_to_pass_green(
    name: str, materialized: dict[str, instances.SWEBenchInstance], tmp_path: Path
) -> None:
    """SWE-bench's validation: with the test patch, FAIL_TO_PASS fails before the gold patch and passes after."""
    instance = materialized[name]
    repo = tasks.checkout(instance.image, instance.base_commit, tmp_path / "work")

    _apply(repo, instance.test_patch)
    before = parse_pytest_log(_run_eval_script(repo, instance.eval_script))
    _apply(repo, instance.patch)
    after = parse_pytest_log(_run_eval_script(repo, instance.eval_script))

    graded = set(instance.FAIL_TO_PASS) | set(instance.PASS_TO_PASS)
    assert set(after) == graded, "every test the eval script runs is graded"
    assert {before[t] for t in instance.FAIL_TO_PASS} == {"FAILED"}
    assert {before[t] for t in instance.PASS_TO_PASS} == {"PASSED"}
    assert set(after.values()) == {"PASSED"}
    # The gold patch touches only source files, the test patch only tests.
    assert all(not f.startswith("tests/") for f in _paths(instance.patch))
    assert all(f.startswith("tests/") for f in _paths(instance.test_patch))


def _paths(patch: str) -> list[str]:
    return [line.split(" b/", 1)[1] for line in patch.splitlines() if line.startswith("diff --git ")]


def test_to_api_instance_maps_every_field() -> None:
    instance = tasks.load_instances(COMMITTED_INDEX)[0]
    api = instances.to_api_instance(instance, workdir="/work/repo")
    assert isinstance(api, Instance)
    assert (api.instance_id, api.repo, api.base_commit, api.image) == (
        instance.instance_id,
        instance.repo,
        instance.base_commit,
        instance.image,
    )
    assert api.workdir == "/work/repo" and api.problem_statement == instance.problem_statement
    assert api.evaluation.fail_to_pass == instance.FAIL_TO_PASS
    assert api.evaluation.pass_to_pass == instance.PASS_TO_PASS
    assert api.evaluation.test_patch == instance.test_patch
    assert api.evaluation.eval_script == instance.eval_script
    assert api.evaluation.log_parser is LogParser.PYTEST
    wire = api.to_wire()
    assert wire["instanceId"] == instance.instance_id and wire["evaluation"]["failToPass"] == instance.FAIL_TO_PASS
    assert Instance.model_validate(wire) == api


def test_unsupported_log_parser_is_a_clear_error() -> None:
    instance = tasks.load_instances(COMMITTED_INDEX)[0].model_copy(update={"log_parser": "parse_log_no_such_parser"})
    with pytest.raises(instances.InstanceError, match="parse_log_no_such_parser.*parse_log_pytest"):
        instances.to_api_instance(instance)


def test_loads_swebench_json_string_test_lists(tmp_path: Path) -> None:
    record = json.loads(COMMITTED_INDEX.read_text().splitlines()[0])
    record["FAIL_TO_PASS"] = json.dumps(record["FAIL_TO_PASS"])
    record["PASS_TO_PASS"] = json.dumps(record["PASS_TO_PASS"])
    (tmp_path / "i.jsonl").write_text(json.dumps(record) + "\n")
    loaded = tasks.load_instances(tmp_path / "i.jsonl")[0]
    assert loaded == tasks.load_instances(COMMITTED_INDEX)[0]


def test_bad_index_line_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "i.jsonl").write_text(COMMITTED_INDEX.read_text().splitlines()[0] + '\n{"instance_id": 3}\n')
    with pytest.raises(instances.InstanceError, match=r"i\.jsonl:2"):
        tasks.load_instances(tmp_path / "i.jsonl")


def test_cli_list_and_materialize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list"]) == 0
    listed = capsys.readouterr().out
    for instance in tasks.load_instances(COMMITTED_INDEX):
        assert instance.instance_id in listed and instance.base_commit[:12] in listed

    assert main(["tasks", "materialize", "--dest", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    written = tasks.load_instances(tmp_path / "m" / tasks.INDEX_FILE)
    assert len(written) == len(TASK_NAMES) and f"wrote {len(written)} instances" in out
    assert all(i.image == f"file://{(tmp_path / 'm').resolve()}/{Path(i.image).name}" for i in written)


def test_cli_index_check_detects_stale_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "tasks"
    shutil.copytree(tasks.DEFAULT_TASKS_DIR, copy)
    assert main(["tasks", "--tasks-dir", str(copy), "index", "--check"]) == 0
    source = copy / "timefmt-duration" / "repo" / "timefmt" / "duration.py"
    source.write_text(source.read_text() + "\n# edited\n")
    assert main(["tasks", "--tasks-dir", str(copy), "index", "--check"]) == 1
    assert "swerollout-examples__timefmt-4" in capsys.readouterr().err
    # materialize notices the recorded base commit no longer matches.
    assert main(["tasks", "--tasks-dir", str(copy), "materialize", "--dest", str(tmp_path / "m")]) == 1
    assert "differs from" in capsys.readouterr().err
    assert main(["tasks", "--tasks-dir", str(copy), "index"]) == 0
    assert main(["tasks", "--tasks-dir", str(copy), "index", "--check"]) == 0
