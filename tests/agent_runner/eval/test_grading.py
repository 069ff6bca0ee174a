"""Grading rules and parsers, for both backends (agreement on real task output: test_eval_tasks.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_runner.eval import grading
from agent_runner.eval.grading import GradingError, grade_log, parse_pytest_log


def test_markers_match_swebench() -> None:
    from swebench.harness import constants

    assert grading.START_TEST_OUTPUT == constants.START_TEST_OUTPUT
    assert grading.END_TEST_OUTPUT == constants.END_TEST_OUTPUT
    assert grading.TEST_EXIT_CODE == constants.TEST_EXIT_CODE
    assert {s.value for s in grading.TestStatus} == {s.value for s in constants.TestStatus}


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
            SAMPLE,
            instance_id="x__y-1",
            repo="x/y",
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            log_parser="pytest",
            eval_type=eval_type,
            backend=backend,
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
    log = ">>>>> Start Test Output\nPASSED tests/t.py::test_a\n>>>>> End Test Output\n>>>>> Test Exit Code: 2\n"
    graded = grade_log(
        log, instance_id="x__y-1", repo="x/y", fail_to_pass=["tests/t.py::test_a"], pass_to_pass=[], backend=backend
    )
    assert not graded.resolved
    assert graded.problem is not None and "exited with 2" in graded.problem


@pytest.mark.parametrize("backend", ["builtin", "swebench"])
def test_output_without_markers_or_results(backend: grading.Backend) -> None:
    no_markers = grade_log(
        "PASSED tests/t.py::test_a\n",
        instance_id="x__y-1",
        repo="x/y",
        fail_to_pass=["tests/t.py::test_a"],
        pass_to_pass=[],
        backend=backend,
    )
    assert not no_markers.resolved and no_markers.problem is not None and "markers" in no_markers.problem
    nothing = grade_log(
        ">>>>> Start Test Output\nImportError: boom\n>>>>> End Test Output\n",
        instance_id="x__y-1",
        repo="x/y",
        fail_to_pass=["tests/t.py::test_a"],
        pass_to_pass=[],
        backend=backend,
    )
    assert not nothing.resolved and nothing.problem is not None and "no test results" in nothing.problem
    assert nothing.problem.endswith("; its first error: ImportError: boom"), nothing.problem


def test_no_test_results_name_the_first_error_line_of_a_real_pytest_run(tmp_path: Path) -> None:
    """A conftest that imports a missing module: pytest collects nothing, and the reason is the module."""
    root = tmp_path
    (root / "tests").mkdir()
    (root / "conftest.py").write_text("import simplejson_not_installed_here\n")
    (root / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_a.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = f">>>>> Start Test Output\n{done.stdout}{done.stderr}>>>>> End Test Output\n>>>>> Test Exit Code: 4\n"
    graded = grade_log(
        log,
        instance_id="x__y-1",
        repo="x/y",
        fail_to_pass=["tests/test_a.py::test_a"],
        pass_to_pass=[],
        backend="builtin",
    )
    assert graded.problem is not None and "no test results" in graded.problem
    assert graded.problem.endswith(
        "its first error: ModuleNotFoundError: No module named 'simplejson_not_installed_here'"
    ), graded.problem


def test_the_first_error_line_is_one_printable_line() -> None:
    assert grading.first_error_line("all good\n>>>>> Test Exit Code: 1\n") is None
    assert grading.first_error_line("setup\nE   KeyError: 'x'\nValueError: later\n") == "KeyError: 'x'"
    assert grading.first_error_line("fatal: not a git repository\n") == "fatal: not a git repository"
    no_pytest = ">>>>> Start Test Output\n\n/venv/bin/python: No module named pytest\n>>>>> End Test Output\n"
    assert grading.first_error_line(no_pytest) == "/venv/bin/python: No module named pytest"
    hostile = grading.first_error_line("RuntimeError: \x1b[31mred\x07" + "x" * 500)
    assert hostile is not None and "\x1b" not in hostile and "\x07" not in hostile
    assert hostile.startswith("RuntimeError:  [31mred ") and len(hostile) == 203 and hostile.endswith("...")


def test_builtin_refuses_parsers_it_does_not_have() -> None:
    with pytest.raises(GradingError, match="needs swebench"):
        grade_log(
            SAMPLE,
            instance_id="x__y-1",
            repo="x/y",
            fail_to_pass=[],
            pass_to_pass=[],
            log_parser="parse_log_django",
            backend="builtin",
        )


def test_swebench_grades_other_parsers_by_name() -> None:
    log = ">>>>> Start Test Output\ntest_add (calc.tests.AddTests) ... ok\n>>>>> End Test Output\n"
    graded = grade_log(
        log,
        instance_id="x__y-1",
        repo="x/y",
        fail_to_pass=["test_add (calc.tests.AddTests)"],
        pass_to_pass=[],
        log_parser="django",
        backend="swebench",
    )
    assert graded.resolved and graded.parser == "parse_log_django"


def test_auto_falls_back_to_builtin_without_swebench() -> None:
    """swebench is an optional extra: with it unimportable, `auto` grades with the builtin parser."""
    program = (
        "import sys\n"
        "sys.modules['swebench'] = None  # as if the extra were not installed\n"
        "from agent_runner.eval.grading import grade_log, swebench_harness_problem\n"
        f"log = {SAMPLE!r}\n"
        "g = grade_log(log, instance_id='x__y-1', repo='x/y', fail_to_pass=['tests/test_a.py::test_one'], pass_to_pass=[])\n"
        "print(g.backend, g.resolved)\n"
        "print(swebench_harness_problem())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    backend_line, problem_line = done.stdout.splitlines()
    assert backend_line == "builtin True"
    assert "not installed" in problem_line and "swerollout[eval]" in problem_line
    # Asking for swebench explicitly in the same situation is a clear error, not a silent switch.
    explicit = program.replace("pass_to_pass=[])", "pass_to_pass=[], backend='swebench')")
    failed = subprocess.run([sys.executable, "-c", explicit], capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0
    assert "GradingError" in failed.stderr and "swebench is not installed" in failed.stderr


REAL_TESTS = """\
import pytest


@pytest.mark.parametrize("x", ["two words", "a - b", "plain"])
def test_y(x):
    assert x != "a - b"


def test_other():
    pass
"""


@pytest.fixture(scope="module")
def real_pytest_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real `pytest -rA` run, between SWE-bench's markers, as an eval script prints it."""
    root = tmp_path_factory.mktemp("repo")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text(REAL_TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "no:randomly", "tests/test_x.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"},
    )
    assert run.returncode == 1, run.stdout + run.stderr  # one parameter fails, on purpose
    return (
        f"{grading.START_TEST_OUTPUT}\n{run.stdout}{grading.END_TEST_OUTPUT}\n"
        f"{grading.TEST_EXIT_CODE}: {run.returncode}\n"
    )


TWO_WORDS = "tests/test_x.py::test_y[two words]"
DASHED = "tests/test_x.py::test_y[a - b]"
PLAIN = "tests/test_x.py::test_y[plain]"
OTHER = "tests/test_x.py::test_other"


@pytest.mark.parametrize("backend", ["builtin", "swebench"])
def test_ids_with_spaces_and_brackets_are_matched_exactly(real_pytest_log: str, backend: grading.Backend) -> None:
    # The parser alone cuts the ids at their first space, as swebench's parse_log_pytest does.
    assert TWO_WORDS not in parse_pytest_log(real_pytest_log)
    assert "tests/test_x.py::test_y[two" in parse_pytest_log(real_pytest_log)

    def grade(f2p: list[str], p2p: list[str]) -> grading.LogGrade:
        return grade_log(
            real_pytest_log, instance_id="x__y-1", repo="x/y", fail_to_pass=f2p, pass_to_pass=p2p, backend=backend
        )

    fixed = grade([TWO_WORDS], [OTHER, PLAIN])
    assert fixed.resolved, fixed
    assert fixed.tests[TWO_WORDS] == "PASSED"
    # The report says where the parser was wrong, and only there.
    assert [(d.test, d.parser_status, d.exact_status) for d in fixed.disagreements] == [(TWO_WORDS, None, "PASSED")]
    assert TWO_WORDS in fixed.disagreement_note() and "exact match" in fixed.disagreement_note()
    # A failing parameter with " - " in its id is read as failing, not as missing or passing.
    broken = grade([TWO_WORDS, DASHED], [OTHER])
    assert not broken.resolved and broken.fail_to_pass.failure == [DASHED]
    assert {d.test: d.exact_status for d in broken.disagreements} == {TWO_WORDS: "PASSED", DASHED: "FAILED"}
    # Ids the log does not show stay missing; ids the parser already reads right make no note.
    assert not grade(["tests/test_x.py::test_y[three words]"], []).resolved
    plain = grade([PLAIN], [OTHER])
    assert plain.resolved and plain.disagreements == [] and plain.disagreement_note() == ""
    # A dataset made with the cutting parser names the cut id; that still grades.
    assert grade(["tests/test_x.py::test_y[two"], []).resolved


def test_exact_matching_prefers_the_longest_known_id() -> None:
    log = "PASSED t.py::t[a - b]\nFAILED t.py::t[a - c] - assert 1\nPASSED t.py::t[a]\n"
    found = grading.match_known_tests(log, ["t.py::t[a", "t.py::t[a - b]", "t.py::t[a - c]", "t.py::t[a]"])
    assert found == {"t.py::t[a - b]": "PASSED", "t.py::t[a - c]": "FAILED", "t.py::t[a]": "PASSED"}
