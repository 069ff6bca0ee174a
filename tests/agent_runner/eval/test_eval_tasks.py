"""Eval mode against every bundled task, in fresh sandboxes served by real swerex-remote."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent_runner.eval.grading import grade_log
from agent_runner.eval.harness import (
    APPLY_COMMANDS,
    CommandOutcome,
    EvalFailure,
    EvalReport,
    EvalRequest,
    EvalSandbox,
    evaluate,
    skipped_report,
)
from swerollout import exit_status, instances
from swerollout.api.v1alpha1 import Instance, Mode
from swerollout_dev import tasks
from tests.support.evalkit import WRONG_PATCHES, SandboxFactory

TASK_NAMES = [p.name for p in tasks.task_dirs()]


def api(instance: instances.SWEBenchInstance) -> Instance:
    return instances.to_api_instance(instance)


def assert_backends_agree(report: EvalReport, instance: instances.SWEBenchInstance) -> None:
    """The builtin grader reads the real eval output exactly as swebench's harness did."""
    assert report.backend is not None and report.backend.startswith("swebench ")
    ours = grade_log(
        report.test_output,
        instance_id=instance.instance_id,
        repo=instance.repo,
        fail_to_pass=instance.FAIL_TO_PASS,
        pass_to_pass=instance.PASS_TO_PASS,
        log_parser=instance.log_parser,
        backend="builtin",
    )
    assert ours.problem is None
    assert (ours.tests, ours.fail_to_pass, ours.pass_to_pass, ours.resolved) == (
        report.tests,
        report.fail_to_pass,
        report.pass_to_pass,
        report.resolved,
    )


@pytest.mark.parametrize("name", TASK_NAMES)
async def test_empty_then_gold_patch(
    name: str, bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    """An empty patch is not resolved (and leaves the sandbox untouched); the gold patch is."""
    instance = bundled[name]
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        empty = await evaluate(sandbox, EvalRequest(instance=api(instance), patch="  \n", workdir=workdir))
        untouched = await sandbox.execute(["git", "status", "--porcelain", "--ignored"], cwd=workdir)
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=instance.patch, workdir=workdir))
    assert not empty.resolved and empty.reward == 0.0
    assert empty.failure is EvalFailure.EMPTY_PATCH and not empty.patch_applied
    assert empty.fail_to_pass.failure == instance.FAIL_TO_PASS
    assert empty.to_reward_status().fail_to_pass_passed == 0
    assert empty.tests_seconds is None, "no test ran"
    assert untouched.output.strip() == ""

    assert report.failure is None, report.message
    assert report.resolved and report.reward == 1.0
    assert report.patch_applied and report.apply_method == "git apply --verbose"
    # The eval script's own time, which status.reward.testsSeconds carries.
    assert report.tests_seconds is not None and report.tests_seconds > 0
    assert report.to_reward_status().tests_seconds == report.tests_seconds
    assert report.fail_to_pass.success == instance.FAIL_TO_PASS and not report.fail_to_pass.failure
    assert report.pass_to_pass.success == instance.PASS_TO_PASS and not report.pass_to_pass.failure
    assert {report.tests[t] for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS} == {"PASSED"}
    status = report.to_reward_status()
    assert (status.value, status.resolved, status.graded) == (1.0, True, True)
    assert status.fail_to_pass_passed == status.fail_to_pass_total == len(instance.FAIL_TO_PASS)
    assert status.pass_to_pass_passed == status.pass_to_pass_total == len(instance.PASS_TO_PASS)
    assert_backends_agree(report, instance)


@pytest.mark.parametrize("name", TASK_NAMES)
async def test_wrong_patch_is_not_resolved(
    name: str, bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    """A plausible partial fix applies and runs, but some graded test still fails."""
    instance = bundled[name]
    wrong = (WRONG_PATCHES / f"{name}.patch").read_text()
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=wrong, workdir=workdir))
    assert report.failure is None, report.message
    assert report.patch_applied
    assert not report.resolved and report.reward == 0.0
    assert report.fail_to_pass.failure or report.pass_to_pass.failure
    for test in report.fail_to_pass.failure + report.pass_to_pass.failure:
        assert report.tests.get(test) in ("FAILED", "ERROR")
    assert report.eval_exit_code == 0  # the wrapper ran; the tests' own status is in the log
    assert ">>>>> Test Exit Code: 1" in report.test_output
    assert_backends_agree(report, instance)


async def test_patch_that_does_not_apply_is_unresolved_with_reason(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    instance = bundled["spanlib-merge"]
    # Written against other file contents: context lines do not exist in the repository.
    stale = (
        "diff --git a/spanlib/intervals.py b/spanlib/intervals.py\n"
        "--- a/spanlib/intervals.py\n"
        "+++ b/spanlib/intervals.py\n"
        "@@ -40,3 +40,3 @@ def somewhere_else():\n"
        "     this line is not in the file\n"
        "-    neither is this one\n"
        "+    nor this replacement\n"
        "     and not this\n"
    )
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=stale, workdir=workdir))
        # Every attempt was rolled back: the tree is clean again.
        status = await sandbox.execute(["git", "status", "--porcelain"], cwd=workdir)
    assert report.failure is EvalFailure.PATCH_APPLY_FAILED
    assert not report.resolved and report.reward == 0.0 and not report.patch_applied
    assert "does not apply" in report.message and "spanlib/intervals.py" in report.message
    assert report.apply_output
    assert status.output.strip() == ""


async def test_large_patch_goes_through_a_file(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A 3 MB patch (over ARG_MAX and far over one argument's 128 KiB) still applies."""
    instance = bundled["cachebox-lru"]
    data = "".join(f"row {i:07d} of generated fixture data for the cache benchmark\n" for i in range(48_000))
    big = "diff --git a/bench/data.txt b/bench/data.txt\nnew file mode 100644\n--- /dev/null\n+++ b/bench/data.txt\n"
    big += f"@@ -0,0 +1,{data.count(chr(10))} @@\n" + "".join("+" + line + "\n" for line in data.splitlines())
    patch = instance.patch + big
    assert len(patch) > 3_000_000
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=patch, workdir=workdir))
        size = await sandbox.execute(["wc", "-c", "bench/data.txt"], cwd=workdir)
    assert report.resolved and report.reward == 1.0, report.message
    assert int(size.output.split()[0]) == len(data)


async def test_candidate_edits_to_test_files_are_reset(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A patch that rewrites the graded tests (to make them pass) does not count: the test patch wins."""
    instance = bundled["timefmt-duration"]
    work = tasks.checkout(instance.image, instance.base_commit, tmp_path / "author")
    (work / "tests" / "test_duration.py").write_text("def test_format_zero():\n    assert True\n")
    cheat = subprocess.run(["git", "diff"], cwd=work, check=True, capture_output=True, text=True).stdout
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=cheat, workdir=workdir))
    assert report.patch_applied and report.failure is None
    assert not report.resolved
    assert report.tests["tests/test_duration.py::test_format_zero"] == "FAILED"
    assert set(report.pass_to_pass.success) == set(instance.PASS_TO_PASS)


async def test_eval_script_timeout_is_unresolved(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    instance = api(bundled["confkit-equals"])
    # The script leaves a child behind; the timeout must kill it too, not only the script.
    script = 'echo ">>>>> Start Test Output"\necho started\nsleep 60 &\necho $! > .sleeper.pid\nwait\n'
    slow = instance.model_copy(update={"evaluation": instance.evaluation.model_copy(update={"eval_script": script})})
    gold = bundled["confkit-equals"].patch
    async with fresh_sandbox(slow) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=slow, patch=gold, workdir=workdir, timeout_seconds=1))
        # Killed processes may linger as zombies where PID 1 does not reap; those count as gone.
        state = await sandbox.execute(["bash", "-c", "ps -o stat= -p $(cat .sleeper.pid) || true"], cwd=workdir)
    assert report.failure is EvalFailure.EVAL_TIMEOUT
    assert not report.resolved and report.reward == 0.0
    assert "started" in report.test_output
    assert state.output.strip() in ("", "Z"), f"the eval script's child outlived the timeout: {state.output!r}"


async def test_output_without_markers_is_unresolved(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    instance = api(bundled["textkit-truncate"])
    unmarked = instance.model_copy(
        update={"evaluation": instance.evaluation.model_copy(update={"eval_script": "python -m pytest -rA tests\n"})}
    )
    async with fresh_sandbox(unmarked) as (sandbox, workdir):
        report = await evaluate(
            sandbox, EvalRequest(instance=unmarked, patch=bundled["textkit-truncate"].patch, workdir=workdir)
        )
    assert report.failure is EvalFailure.NO_TEST_OUTPUT
    assert "markers" in report.message
    assert not report.resolved


def test_gated_rollout_gets_zero_without_evaluation(bundled: dict[str, instances.SWEBenchInstance]) -> None:
    instance = api(bundled["cachebox-lru"])
    decision = exit_status.gate_exit_status("exit_context", Mode.TRAIN)
    report = skipped_report(instance, decision)
    status = report.to_reward_status()
    assert (status.value, status.resolved, status.graded) == (0.0, False, False)
    assert status.fail_to_pass_total == 1 and status.fail_to_pass_passed == 0
    assert "exit_context" in status.message


async def test_fuzzy_patch_falls_back_to_patch_fuzz(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    """A patch whose outer context line drifted is refused by git apply but applied by `patch --fuzz`.
    The fallback path reuses the files the first attempt wrote (each write is a sandbox round trip)."""
    instance = bundled["timefmt-duration"]
    fuzzy = _fuzzy(instance.patch)
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        counted = _CountedWrites(sandbox)
        report = await evaluate(counted, EvalRequest(instance=api(instance), patch=fuzzy, workdir=workdir))
        leftovers = await sandbox.execute(["bash", "-c", "find . -name '*.rej' -o -name '*.orig'"], cwd=workdir)
    assert report.apply_method == APPLY_COMMANDS[-1] and APPLY_COMMANDS[-1].startswith("patch ")
    assert report.resolved and report.reward == 1.0, report.message
    assert leftovers.output.strip() == ""
    names = [path.rsplit("/", 1)[-1] for path in counted.written]
    assert sorted(names) == ["candidate.diff", "eval.sh", "test-paths", "test.diff"], counted.written


class _CountedWrites:
    """An eval sandbox that records the paths written through it."""

    def __init__(self, sandbox: EvalSandbox) -> None:
        self.sandbox, self.written = sandbox, list[str]()

    async def execute(
        self, command: str | list[str], *, timeout: float | None = None, cwd: str | None = None
    ) -> CommandOutcome:
        return await self.sandbox.execute(command, timeout=timeout, cwd=cwd)

    async def read_file(self, path: str) -> str:
        return await self.sandbox.read_file(path)

    async def write_file(self, path: str, content: str) -> None:
        self.written.append(path)
        await self.sandbox.write_file(path, content)


def _fuzzy(patch: str) -> str:
    """The gold patch with its outer context drifted: only `patch --fuzz` (the last method) applies it."""
    drifted_line = "     seconds = int(seconds)\n"
    assert drifted_line in patch
    fuzzy = patch.replace(drifted_line, "     seconds = int(seconds)  # whole seconds only\n", 1)
    return "".join(line for line in fuzzy.splitlines(keepends=True) if not line.startswith("index "))


@pytest.mark.parametrize("candidate", ["gold", "fuzzy"])
async def test_a_test_patch_that_does_not_apply_is_the_instances_fault(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory, candidate: str
) -> None:
    """The candidate applied (by the first method, in the one command of the usual case, or by
    a fallback, step by step), then the instance's own test patch did not: named as such."""
    instance = bundled["timefmt-duration"]
    patch = instance.patch if candidate == "gold" else _fuzzy(instance.patch)
    assert "tests/test_duration.py" in instance.test_patch
    broken = (
        "diff --git a/tests/test_duration.py b/tests/test_duration.py\n"
        "--- a/tests/test_duration.py\n"
        "+++ b/tests/test_duration.py\n"
        "@@ -40,3 +40,3 @@\n"
        "     this line is not in the file\n"
        "-    neither is this one\n"
        "+    nor this replacement\n"
        "     and not this\n"
    )
    inst = api(instance)
    inst = inst.model_copy(update={"evaluation": inst.evaluation.model_copy(update={"test_patch": broken})})
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=inst, patch=patch, workdir=workdir))
    assert report.failure is EvalFailure.TEST_PATCH_APPLY_FAILED, report.message
    assert report.patch_applied and report.apply_method == (
        APPLY_COMMANDS[0] if candidate == "gold" else APPLY_COMMANDS[-1]
    )
    assert report.message.startswith("the instance's test patch does not apply (broken instance?)")
    assert "test_duration.py" in report.message and not report.resolved and report.reward == 0.0
    # The candidate's own apply output, not the test patch's.
    assert "__SWEROLLOUT_STEP_" not in report.apply_output and "timefmt/duration.py" in report.apply_output
    assert "test_duration.py" not in report.apply_output


async def test_a_test_file_reset_that_fails_is_named(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    """The test files are reset to the base commit before the test patch: a base commit the
    repository lacks fails that step, and the report says which step."""
    instance = bundled["timefmt-duration"]
    inst = api(instance).model_copy(update={"base_commit": "0" * 40})
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=inst, patch=instance.patch, workdir=workdir))
    assert report.failure is EvalFailure.TEST_PATCH_APPLY_FAILED, report.message
    assert report.message.startswith("resetting the test files to 000000000000 failed:"), report.message
    assert report.apply_method == APPLY_COMMANDS[0]


def _new_file_diff(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


async def test_test_patch_touching_many_long_paths(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    """Resetting the test files works past one argument's 128 KiB, and removes the candidate's copies of new test files."""
    instance = api(bundled["confkit-equals"])
    folder = "tests/generated/" + "/".join(f"{'deeply_nested_fixture_directory_' * 2}{level}" for level in range(6))
    # Just past one argument's 128 KiB of paths, while the whole instance stays inside the
    # API's 512 KiB bound on its texts.
    generated = [f"{folder}/test_case_{i:05d}.py" for i in range(320)]
    assert sum(len(p) for p in generated) > 128 * 1024
    test_patch = instance.evaluation.test_patch + "".join(
        _new_file_diff(path, "def test_generated():\n    assert True\n") for path in generated
    )
    big = instance.model_copy(update={"evaluation": instance.evaluation.model_copy(update={"test_patch": test_patch})})
    # The candidate also creates one of those files; applying the test patch on top would fail without the reset.
    candidate = bundled["confkit-equals"].patch + _new_file_diff(
        generated[0], "def test_generated():\n    assert False\n"
    )
    async with fresh_sandbox(big) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=big, patch=candidate, workdir=workdir))
        content = await sandbox.read_file(f"{workdir}/{generated[0]}")
    assert report.failure is None, report.message
    assert report.resolved and report.reward == 1.0
    assert "assert True" in content


async def test_instance_without_eval_script_runs_its_named_tests(
    bundled: dict[str, instances.SWEBenchInstance], fresh_sandbox: SandboxFactory
) -> None:
    instance = api(bundled["textkit-truncate"])
    bare = instance.model_copy(update={"evaluation": instance.evaluation.model_copy(update={"eval_script": ""})})
    async with fresh_sandbox(bare) as (sandbox, workdir):
        report = await evaluate(
            sandbox, EvalRequest(instance=bare, patch=bundled["textkit-truncate"].patch, workdir=workdir)
        )
    assert report.resolved, report.message
    assert report.fail_to_pass.total == 3 and report.pass_to_pass.total == 6


async def test_a_missing_test_dependency_is_named_in_the_reward_message(
    fresh_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The gold patch of a task whose tests import inflection, in a sandbox of our venv alone
    (no task environment): no graded test runs, and the message says why."""
    root = Path(tasks.__file__).resolve().parents[2] / "examples" / "tasks-with-requirements"
    (instance,) = tasks.materialize_tasks(tmp_path / "tasks", root)
    async with fresh_sandbox(api(instance)) as (sandbox, workdir):
        report = await evaluate(sandbox, EvalRequest(instance=api(instance), patch=instance.patch, workdir=workdir))
    assert not report.resolved and report.reward == 0.0
    assert report.message.startswith("not resolved: FAIL_TO_PASS 0/2, PASS_TO_PASS 0/2"), report.message
    assert report.message.endswith(
        "no graded test ran; first error: ModuleNotFoundError: No module named 'inflection'"
    ), report.message
    assert report.to_reward_status().message == report.message
