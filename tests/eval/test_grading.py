"""Grading: the builtin pytest parser and swebench's harness agree on real pytest output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runner import grading
from agent_runner.grading import GradingError, grade_log, parse_pytest_log
from swerollout import tasks

TASK_NAMES = [p.name for p in tasks.task_dirs()]


def _eval_output(instance: tasks.SWEBenchInstance, repo: Path, *patches: str) -> str:
    for patch in patches:
        subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, check=True, capture_output=True, text=True)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", "-c", instance.eval_script], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _grade(log: str, instance: tasks.SWEBenchInstance, backend: grading.Backend) -> grading.LogGrade:
    return grade_log(
        log,
        instance_id=instance.instance_id,
        repo=instance.repo,
        fail_to_pass=instance.FAIL_TO_PASS,
        pass_to_pass=instance.PASS_TO_PASS,
        log_parser=instance.log_parser,
        backend=backend,
    )


def test_markers_match_swebench() -> None:
    from swebench.harness import constants

    assert grading.START_TEST_OUTPUT == constants.START_TEST_OUTPUT
    assert grading.END_TEST_OUTPUT == constants.END_TEST_OUTPUT
    assert grading.TEST_EXIT_CODE == constants.TEST_EXIT_CODE
    assert {s.value for s in grading.TestStatus} == {s.value for s in constants.TestStatus}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_both_backends_agree_on_real_pytest_output(name: str, bundled: dict[str, tasks.SWEBenchInstance], tmp_path: Path) -> None:
    instance = bundled[name]
    wrong = (Path(__file__).parent / "wrong_patches" / f"{name}.patch").read_text()
    runs = {
        "base": (instance.test_patch,),
        "wrong": (instance.test_patch, wrong),
        "gold": (instance.test_patch, instance.patch),
    }
    verdicts = {}
    for label, patches in runs.items():
        repo = tasks.checkout(instance.image, instance.base_commit, tmp_path / label)
        log = _eval_output(instance, repo, *patches)
        ours, theirs = _grade(log, instance, "builtin"), _grade(log, instance, "swebench")
        assert ours.backend == "builtin" and theirs.backend.startswith("swebench ")
        assert ours.tests == theirs.tests, label
        assert ours.fail_to_pass == theirs.fail_to_pass and ours.pass_to_pass == theirs.pass_to_pass, label
        assert ours.resolved == theirs.resolved and ours.problem is None and theirs.problem is None
        verdicts[label] = ours.resolved
    assert verdicts == {"base": False, "wrong": False, "gold": True}


SAMPLE = """\
noise before
>>>>> Start Test Output
============================= test session starts ==============================
collected 6 items

tests/test_a.py ..F.sx                                                   [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a - b]
\x1b[32mPASSED\x1b[0m tests/test_a.py::test_coloured
FAILED tests/test_a.py::test_three - AssertionError: assert 1 == 2 - with dashes
SKIPPED [1] tests/test_a.py:40: needs network
SKIPPED tests/test_a.py::test_skipped_one
XFAIL tests/test_a.py::test_known_bug - reason: upstream
ERROR tests/test_b.py::test_setup - fixture 'db' not found
==================== 1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ===
>>>>> End Test Output
>>>>> Test Exit Code: 1
"""


def test_builtin_parser_reads_the_short_summary() -> None:
    assert parse_pytest_log(SAMPLE) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_param[a": "PASSED",  # ids with spaces are cut, as swebench does
        "tests/test_a.py::test_skipped_one": "SKIPPED",
        "tests/test_a.py::test_three": "FAILED",
        "tests/test_a.py::test_known_bug": "XFAIL",
        "tests/test_b.py::test_setup": "ERROR",
    }


@pytest.mark.parametrize("backend", ["builtin", "swebench"])
def test_grading_rules(backend: grading.Backend) -> None:
    def grade(f2p: list[str], p2p: list[str], eval_type: str = "pass_and_fail") -> grading.LogGrade:
        return grade_log(
            SAMPLE, instance_id="x__y-1", repo="x/y", fail_to_pass=f2p, pass_to_pass=p2p,
            log_parser="pytest", eval_type=eval_type, backend=backend,
        )

    ok = grade(["tests/test_a.py::test_one", "tests/test_a.py::test_known_bug"], ["tests/test_a.py::test_skipped_one"])
    assert ok.resolved and ok.fail_to_pass.total == 2 and not ok.fail_to_pass.failure
    # A skipped test keeps PASS_TO_PASS but does not count as fixing FAIL_TO_PASS.
    assert ok.pass_to_pass.success == ["tests/test_a.py::test_skipped_one"]
    assert not grade(["tests/test_a.py::test_skipped_one"], []).resolved
    # Coloured summary lines are not understood by either parser: the test counts as missing.
    assert not grade(["tests/test_a.py::test_coloured"], []).resolved
    missing = grade(["tests/test_a.py::test_never_ran"], [])
    assert not missing.resolved and missing.fail_to_pass.failure == ["tests/test_a.py::test_never_ran"]
    broken_p2p = grade(["tests/test_a.py::test_one"], ["tests/test_b.py::test_setup"])
    assert not broken_p2p.resolved and broken_p2p.pass_to_pass.failure == ["tests/test_b.py::test_setup"]
    # fail_only: only an explicit FAILED fails; a missing or erroring test is not a failure.
    lenient = grade(["tests/test_a.py::test_never_ran"], ["tests/test_b.py::test_setup"], "fail_only")
    assert lenient.resolved
    strict = grade(["tests/test_a.py::test_three"], [], "fail_only")
    assert not strict.resolved


@pytest.mark.parametrize("backend", ["builtin", "swebench"])
def test_fake_passes_contradicted_by_exit_code_are_not_graded(backend: grading.Backend) -> None:
    """A patch could print PASSED lines itself; the recorded exit status exposes it."""
    log = (
        ">>>>> Start Test Output\nPASSED tests/t.py::test_a\n>>>>> End Test Output\n>>>>> Test Exit Code: 2\n"
    )
    graded = grade_log(log, instance_id="x__y-1", repo="x/y", fail_to_pass=["tests/t.py::test_a"], pass_to_pass=[], backend=backend)
    assert not graded.resolved
    assert graded.problem is not None and "exited with 2" in graded.problem


@pytest.mark.parametrize("backend", ["builtin", "swebench"])
def test_output_without_markers_or_results(backend: grading.Backend) -> None:
    no_markers = grade_log("PASSED tests/t.py::test_a\n", instance_id="x__y-1", repo="x/y",
                           fail_to_pass=["tests/t.py::test_a"], pass_to_pass=[], backend=backend)
    assert not no_markers.resolved and no_markers.problem is not None and "markers" in no_markers.problem
    nothing = grade_log(">>>>> Start Test Output\nImportError: boom\n>>>>> End Test Output\n", instance_id="x__y-1",
                        repo="x/y", fail_to_pass=["tests/t.py::test_a"], pass_to_pass=[], backend=backend)
    assert not nothing.resolved and nothing.problem is not None and "no test results" in nothing.problem


def test_builtin_refuses_parsers_it_does_not_have() -> None:
    with pytest.raises(GradingError, match="needs swebench"):
        grade_log(SAMPLE, instance_id="x__y-1", repo="x/y", fail_to_pass=[], pass_to_pass=[],
                  log_parser="parse_log_django", backend="builtin")


def test_swebench_grades_other_parsers_by_name() -> None:
    log = ">>>>> Start Test Output\ntest_add (calc.tests.AddTests) ... ok\n>>>>> End Test Output\n"
    graded = grade_log(log, instance_id="x__y-1", repo="x/y", fail_to_pass=["test_add (calc.tests.AddTests)"],
                       pass_to_pass=[], log_parser="django", backend="swebench")
    assert graded.resolved and graded.parser == "parse_log_django"
